"""Python-side checkpoint costs through preempt vs torch.save / torch.load (and
torch.distributed.checkpoint when the installed torch has it), same run, same directory.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/bench_python.py --sizes 1,4 --reps 3 --dir /var/tmp/bench

For each state size (GiB of float32 parameters in 64 MiB tensors, updated by an SGD optimizer),
every figure is the median of --reps rounds, with the spread (min-max):
  copy      clone of every tensor into pre-allocated memory (what any snapshot must at least do)
  stall     what training is blocked for by one periodic checkpoint: Runtime.save_async() plus
            the fence at the next optimizer.step() waiting for the rest of the copy, which
            overlaps a simulated step of --step-s seconds of matrix products
  stall (no overlap)  the same with overlap_copy=False: the whole copy inside save_async()
  persist   save_async() -> committed (io_uring / O_DIRECT, checksums, fsync, COMMIT)
  torch.save   torch.save(state_dict) + fsync: blocks training for all of it
  restore   Runtime.restore() into the live module, page cache dropped for the files first
  torch.load   torch.load + load_state_dict, page cache dropped first
and `step_end` latency with nothing due (single rank).
"""

import argparse
import gc
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
    """posix_fadvise(DONTNEED) on a file or every file under root (no root privileges needed)."""
    paths = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def simulated_step(seconds):
    """Matrix products for about `seconds` (the forward/backward a copy can overlap)."""
    a = torch.rand(256, 256)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = torch.mm(a, a).clamp_(0, 1)


def stall_rounds(state, ck, reps, step_s, overlap):
    """(first stall, [stall], [persist], [fence wait]) of periodic checkpoints, as a training loop sees them."""
    shutil.rmtree(ck, ignore_errors=True)
    optim = torch.optim.SGD(state.parameters(), lr=0.0)  # no gradients: step() only passes the fence
    rt = preempt.Runtime(ck, install_signal_handlers=False, staging_buffers=1, track_rng=False,
                         overlap_copy=overlap, keep_last=1)
    rt.track("model", state)
    rt.track("optim", optim)
    rt.restore()
    first, stalls, persists, fences = 0.0, [], [], []
    for i in range(reps + 1):
        t_call, h = timed(lambda: rt.save_async(step=i + 1))
        simulated_step(step_s)
        t_fence, _ = timed(optim.step)
        t_wait, _ = timed(h.wait)
        if i == 0:  # the first one also allocates and pre-faults the staging memory
            first = t_call + t_fence
        else:
            stalls.append(t_call + t_fence)
            fences.append(t_fence)
            persists.append(h.stats()["total_s"])
    rt.close()
    rt = optim = None
    gc.collect()
    return first, stalls, persists, fences


def bench_size(gib, root, reps, step_s):
    state = State(gib)
    nbytes = sum(p.numel() * 4 for p in state.parameters())
    res = {"gib": nbytes / (1 << 30)}
    dst = [torch.empty_like(p) for p in state.parameters()]
    res["copy_s"] = [timed(lambda: [d.copy_(p.detach()) for d, p in zip(dst, state.parameters())])[0]
                     for _ in range(reps)]
    dst = None

    ck = os.path.join(root, "preempt")
    res["first_stall_s"], res["stall_s"], res["persist_s"], res["fence_s"] = stall_rounds(state, ck, reps, step_s, True)
    _, res["stall_no_overlap_s"], _, _ = stall_rounds(state, ck, reps, step_s, False)

    restores = []
    for _ in range(reps):
        drop_cache(ck)
        rt = preempt.Runtime(ck, install_signal_handlers=False, track_rng=False)
        rt.track("model", state)
        rt.track("optim", torch.optim.SGD(state.parameters(), lr=0.0))
        restores.append(timed(rt.restore)[0])
        rt.close()
    res["restore_s"] = restores
    shutil.rmtree(ck, ignore_errors=True)

    path = os.path.join(root, "torch.pt")
    saves, loads = [], []
    for _ in range(reps):
        def save():
            with open(path, "wb") as f:
                torch.save(state.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())
        saves.append(timed(save)[0])
        drop_cache(path)
        loads.append(timed(lambda: state.load_state_dict(torch.load(path)))[0])
        gc.collect()
    res["torch_save_s"], res["torch_load_s"] = saves, loads
    os.remove(path)

    try:
        import torch.distributed.checkpoint as dcp
        dcp_dir = os.path.join(root, "dcp")
        shutil.rmtree(dcp_dir, ignore_errors=True)
        os.makedirs(dcp_dir)
        sd = state.state_dict()
        res["dcp_save_s"] = [timed(lambda: dcp.save_state_dict(sd, dcp.FileSystemWriter(dcp_dir), no_dist=True))[0]]
        drop_cache(dcp_dir)
        res["dcp_load_s"] = [timed(lambda: dcp.load_state_dict(sd, dcp.FileSystemReader(dcp_dir), no_dist=True))[0]]
        shutil.rmtree(dcp_dir)
    except Exception as e:  # absent or incompatible in this torch
        res["dcp"] = f"unavailable: {type(e).__name__}: {e}"[:120]
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


def spread(values):
    values = values if isinstance(values, list) else [values]
    med = statistics.median(values)
    return f"{med:.3f} ({min(values):.3f}-{max(values):.3f})"


ROWS = [("plain copy of the tensors", "copy_s"), ("stall: save_async + fence at the next step", "stall_s"),
        ("  of which the fence wait", "fence_s"),
        ("stall without overlap (whole copy in save_async)", "stall_no_overlap_s"),
        ("persist (save_async -> committed)", "persist_s"), ("torch.save + fsync", "torch_save_s"),
        ("restore into the live module", "restore_s"), ("torch.load + load_state_dict", "torch_load_s"),
        ("torch.distributed.checkpoint save", "dcp_save_s"), ("torch.distributed.checkpoint load", "dcp_load_s")]


def table(sizes):
    head = "| seconds, median (min-max) | " + " | ".join(f"{r['gib']:.2f} GiB" for r in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for label, key in ROWS:
        cells = [spread(r[key]) if key in r else r.get("dcp", "-") for r in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    med = statistics.median
    lines.append("| stall: torch.save / preempt (target >= 20) | " + " | ".join(
        f"{med(r['torch_save_s']) / med(r['stall_s']):.1f}x" for r in sizes) + " |")
    lines.append("| restore: torch.load / preempt (target >= 5) | " + " | ".join(
        f"{med(r['torch_load_s']) / med(r['restore_s']):.1f}x" for r in sizes) + " |")
    lines.append("| first stall (allocates staging) | " + " | ".join(f"{r['first_stall_s']:.3f}" for r in sizes) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,4", help="GiB, comma separated")
    ap.add_argument("--dir", default="/var/tmp/preempt-bench-python")
    ap.add_argument("--reps", type=int, default=3, help="rounds per measurement (median and spread)")
    ap.add_argument("--step-s", type=float, default=0.5, help="simulated training step the copy overlaps")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.reps < 1 or a.step_s < 0:
        ap.error("--reps must be >= 1 and --step-s >= 0")
    os.makedirs(a.dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    out = {"torch": torch.__version__, "step_s": a.step_s, "sizes": [], **bench_step_end(a.dir)}
    print(f"step_end with nothing due: median {out['step_end_us_median']:.2f} us, min {out['step_end_us_min']:.2f} us")
    for g in (float(x) for x in a.sizes.split(",")):
        out["sizes"].append(bench_size(g, a.dir, a.reps, a.step_s))
        print(table(out["sizes"][-1:]))
        sys.stdout.flush()
    print(f"\ntorch {torch.__version__}, simulated step {a.step_s} s, {a.reps} rounds\n" + table(out["sizes"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
