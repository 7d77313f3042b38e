"""Python-side checkpoint costs through preempt vs torch.save / torch.load (and
torch.distributed.checkpoint when the installed torch has it), same run, same directory.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/bench_python.py --sizes 0.25,1 --dir /var/tmp/bench

For each state size (GiB of float32 parameters in 64 MiB tensors):
  copy      clone of every tensor into pre-allocated memory (what any snapshot must at least do)
  stall     Runtime.save_async(): the copy into warm staging, the time training is blocked
  persist   save_async() → committed (io_uring / O_DIRECT, checksums, fsync, COMMIT)
  torch.save   torch.save(state_dict) + fsync: blocks training for all of it
  restore   Runtime.restore() into the live module, page cache dropped for the files first
  torch.load   torch.load + load_state_dict, page cache dropped first
and `step_end` latency with nothing due (single rank).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch

import preempt

TENSOR_BYTES = 64 << 20


class State(torch.nn.Module):
    def __init__(self, gib):
        super().__init__()
        n = max(1, int(gib * (1 << 30)) // TENSOR_BYTES)
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.rand(TENSOR_BYTES // 4)) for _ in range(n)])


def drop_cache(root):
    """posix_fadvise(DONTNEED) on every file under root (no root privileges needed)."""
    for dirpath, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(dirpath, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_size(gib, root, reps):
    state = State(gib)
    nbytes = sum(p.numel() * 4 for p in state.parameters())
    res = {"gib": nbytes / (1 << 30)}
    dst = [torch.empty_like(p) for p in state.parameters()]
    copies = []
    for _ in range(reps):
        t, _ = timed(lambda: [d.copy_(p.detach()) for d, p in zip(dst, state.parameters())])
        copies.append(t)
    del dst
    res["copy_s"] = min(copies)

    ck = os.path.join(root, "preempt")
    shutil.rmtree(ck, ignore_errors=True)
    rt = preempt.Runtime(ck, install_signal_handlers=False, staging_buffers=1, track_rng=False)
    rt.track("model", state)
    rt.restore()
    stalls, persists = [], []
    for i in range(reps + 1):
        t, h = timed(lambda: rt.save_async(step=i + 1))
        t2, _ = timed(lambda: h.wait())
        if i == 0:  # the first one also allocates and pre-faults the staging memory
            res["first_stall_s"] = t
        else:
            stalls.append(t)
            persists.append(t + t2)
    res["stall_s"], res["persist_s"] = min(stalls), min(persists)
    rt.close()

    restores = []
    for _ in range(reps):
        drop_cache(ck)
        rt = preempt.Runtime(ck, install_signal_handlers=False, track_rng=False)
        rt.track("model", state)
        t, _ = timed(rt.restore)
        restores.append(t)
        rt.close()
    res["restore_s"] = min(restores)

    path = os.path.join(root, "torch.pt")
    saves, loads = [], []
    for _ in range(reps):
        def save():
            with open(path, "wb") as f:
                torch.save(state.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())
        saves.append(timed(save)[0])
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        loads.append(timed(lambda: state.load_state_dict(torch.load(path)))[0])
    res["torch_save_s"], res["torch_load_s"] = min(saves), min(loads)
    os.remove(path)

    try:
        import torch.distributed.checkpoint as dcp
        dcp_dir = os.path.join(root, "dcp")
        shutil.rmtree(dcp_dir, ignore_errors=True)
        os.makedirs(dcp_dir)
        sd = state.state_dict()
        res["dcp_save_s"] = timed(lambda: dcp.save_state_dict(sd, dcp.FileSystemWriter(dcp_dir), no_dist=True))[0]
        drop_cache(dcp_dir)
        res["dcp_load_s"] = timed(lambda: dcp.load_state_dict(sd, dcp.FileSystemReader(dcp_dir), no_dist=True))[0]
        shutil.rmtree(dcp_dir)
    except Exception as e:  # absent or incompatible in this torch
        res["dcp"] = f"unavailable: {type(e).__name__}: {e}"[:120]
    shutil.rmtree(ck, ignore_errors=True)
    return res


def bench_step_end(root, n=200000):
    ck = os.path.join(root, "step_end")
    shutil.rmtree(ck, ignore_errors=True)
    rt = preempt.Runtime(ck, every_steps=10 ** 9, install_signal_handlers=True)
    rt.track("model", torch.nn.Linear(4, 4))
    rt.restore()
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for s in range(n):
            rt.step_end(s)
        per.append((time.perf_counter() - t0) / n * 1e6)
    rt.close()
    shutil.rmtree(ck, ignore_errors=True)
    return {"step_end_us_median": statistics.median(per), "step_end_us_min": min(per)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="0.25,1", help="GiB, comma separated")
    ap.add_argument("--dir", default="/var/tmp/preempt-bench-python")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    out = {"torch": torch.__version__, "sizes": [], **bench_step_end(a.dir)}
    print(f"step_end with nothing due: median {out['step_end_us_median']:.2f} us, min {out['step_end_us_min']:.2f} us")
    for g in (float(x) for x in a.sizes.split(",")):
        r = bench_size(g, a.dir, a.reps)
        out["sizes"].append(r)
        print(f"{r['gib']:.2f} GiB: copy {r['copy_s']:.3f}s stall {r['stall_s']:.3f}s "
              f"(first, allocating staging: {r['first_stall_s']:.3f}s) persist {r['persist_s']:.3f}s | torch.save+fsync "
              f"{r['torch_save_s']:.3f}s -> stall {r['torch_save_s'] / r['stall_s']:.1f}x lower | restore "
              f"{r['restore_s']:.3f}s vs torch.load {r['torch_load_s']:.3f}s -> {r['torch_load_s'] / r['restore_s']:.1f}x"
              + (f" | dcp save {r['dcp_save_s']:.3f}s load {r['dcp_load_s']:.3f}s" if "dcp_save_s" in r else
                 f" | dcp {r.get('dcp')}"))
        sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
