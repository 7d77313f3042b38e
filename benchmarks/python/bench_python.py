"""Python-side checkpoint costs through preempt vs torch.save / torch.load (and
torch.distributed.checkpoint when the installed torch has it), same run, same directory.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/bench_python.py --sizes 1,4 --reps 3

For each state size (GiB of float32 parameters in 64 MiB tensors, updated by an SGD optimizer),
each repetition runs every measurement once, interleaved, so that a disk whose speed drifts over
minutes slows both sides of a ratio alike:
  stall        what training is blocked for by one periodic checkpoint: Runtime.save_async() plus
               the fence at the next optimizer.step() (which copies what is left alongside the
               background copy), which overlaps a simulated step of --step-s seconds of matrix
               products on every core
  persist      save_async() -> committed (io_uring / O_DIRECT, checksums, fsync, COMMIT)
  torch.save   torch.save(state_dict) + fsync: blocks training for all of it
  copy         memcpy of every tensor into pre-faulted memory on one thread (what the background
               copy does; the stall is what is left of it at the fence)
  restore      Runtime.restore() into the live module, cold
  preempt.load the functional API into the live state dict, cold
  store        the C++ store's own restore of the same checkpoint (preempt._C.Store.restore into
               the same tensors, no Python layer), cold
  torch.load   torch.load + load_state_dict, cold
  disk read    a plain sequential read (8 MiB read() calls) of the preempt data files and of the
               torch.save file, cold: the disk's speed in this repetition
The writes come first in every repetition (stall and persist, torch.save, copy), then one untimed
read of both files (a virtual disk reads slowly while the host writes back what was just synced),
then the reads, rotated by two places per repetition so that no reader is always first.
"Cold" is set by --cold: drop (sync + /proc/sys/vm/drop_caches, root only; the default) or evict
(posix_fadvise DONTNEED on the files about to be read). Each figure is reported as the median and
the min-max over the repetitions, and each ratio is computed per repetition (median, min-max), so
a ratio is never made of two measurements minutes apart. `step_end` latency with nothing due
(single rank) is measured once. Then, outside the interleaved rounds: the stall without overlap
(overlap_copy=False: the whole copy inside save_async) and one torch.distributed.checkpoint round.
"""

import argparse
import ctypes
import gc
import json
import mmap
import os
import shutil
import statistics
import sys
import time

import torch

import preempt
from preempt import _C

TENSOR_BYTES = 64 << 20
READ_BYTES = 8 << 20
_libc = ctypes.CDLL(None)
_libc.memcpy.restype = ctypes.c_void_p
_libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]


class State(torch.nn.Module):
    def __init__(self, gib):
        super().__init__()
        n = max(1, int(gib * (1 << 30)) // TENSOR_BYTES)
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.rand(TENSOR_BYTES // 4)) for _ in range(n)])

    def touch(self):
        """Changes one value in every 4 MiB, so that no chunk of the next checkpoint is unchanged
        (unchanged chunks are referenced, not written: persist would measure nothing)."""
        with torch.no_grad():
            for p in self.params:
                p.view(-1)[:: (1 << 20)].add_(1.0)


def files_under(root):
    if os.path.isfile(root):
        return [root]
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def make_cold(mode, *roots):
    if mode == "drop":
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return
    for path in (p for root in roots for p in files_under(root)):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def sequential_read(paths):
    """(bytes, seconds) of reading `paths` front to back with 8 MiB read() calls."""
    buf = mmap.mmap(-1, READ_BYTES)
    total, t0 = 0, time.perf_counter()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [buf])
                total += n
                if n < READ_BYTES:
                    break
        finally:
            os.close(fd)
    return total, time.perf_counter() - t0


def simulated_step(seconds):
    """Matrix products for about `seconds` (the forward/backward a copy can overlap)."""
    a = torch.rand(256, 256)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = torch.mm(a, a).clamp_(0, 1)


class Rounds:
    """The objects one size needs across its repetitions."""

    def __init__(self, gib, root, args):
        self.args = args
        self.state = State(gib)
        self.nbytes = sum(p.numel() * 4 for p in self.state.parameters())
        self.ck = os.path.join(root, "preempt")
        self.pt = os.path.join(root, "torch.pt")
        shutil.rmtree(self.ck, ignore_errors=True)
        self.optim = torch.optim.SGD(self.state.parameters(), lr=0.0)  # no gradients: step() passes the fence
        self.rt = self.runtime(overlap=True)
        self.step = 1
        t, h = timed(lambda: self.rt.save_async(step=self.step))  # allocates and pre-faults staging
        t_fence, _ = timed(self.optim.step)
        h.wait()
        self.first_stall_s = t + t_fence
        self.copy_dst = _C.Buffer(TENSOR_BYTES)

    def runtime(self, overlap):
        rt = preempt.Runtime(self.ck, install_signal_handlers=False, staging_buffers=1, track_rng=False,
                             overlap_copy=overlap, keep_last=1)
        rt.track("model", self.state)
        rt.track("optim", self.optim)
        rt.restore()
        return rt

    def stall(self, rt=None):
        """(stall_s, fence_s, persist_s) of one periodic checkpoint, as a training loop sees it."""
        rt = rt or self.rt
        self.step += 1
        self.state.touch()
        t_call, h = timed(lambda: rt.save_async(step=self.step))
        simulated_step(self.args.step_s)
        t_fence, _ = timed(self.optim.step)
        h.wait()
        return t_call + t_fence, t_fence, h.stats()["total_s"]

    def copy(self):
        dst = self.copy_dst.address
        t0 = time.perf_counter()
        for p in self.state.parameters():
            _libc.memcpy(dst, p.data_ptr(), p.numel() * 4)
        return time.perf_counter() - t0

    def torch_save(self):
        def save():
            with open(self.pt, "wb") as f:
                torch.save(self.state.state_dict(), f)
                f.flush()
                os.fsync(f.fileno())
        return timed(save)[0]

    def cold(self, fn, root):
        make_cold(self.args.cold, root)
        return timed(fn)[0]

    def restore(self):
        rt = preempt.Runtime(self.ck, install_signal_handlers=False, track_rng=False)
        rt.track("model", self.state)
        rt.track("optim", torch.optim.SGD(self.state.parameters(), lr=0.0))
        try:
            return self.cold(rt.restore, self.ck)
        finally:
            rt.close()

    def functional_load(self):
        sd = {"model": self.state, "optim": torch.optim.SGD(self.state.parameters(), lr=0.0)}
        return self.cold(lambda: preempt.load(sd, self.ck), self.ck)

    def store_restore(self):
        targets = [(f"model:params.{i}", "float32", list(p.shape), p.data_ptr(), p.numel() * 4)
                   for i, p in enumerate(self.state.parameters())]
        store = _C.Store(self.ck)
        try:
            return self.cold(lambda: store.restore(targets, strict=False), self.ck)
        finally:
            store.close()

    def torch_load(self):
        def load():
            self.state.load_state_dict(torch.load(self.pt))
        t = self.cold(load, self.pt)
        gc.collect()
        return t

    def newest_data_files(self):
        """The data files of the newest checkpoint (every chunk changed since the one before)."""
        newest = max(d for d in os.listdir(self.ck) if d.startswith("step-") and d[5:].isdigit())
        return [p for p in files_under(os.path.join(self.ck, newest)) if p.endswith(".bin")]

    def disk_read_gbps(self, paths):
        make_cold(self.args.cold, *paths)
        n, s = sequential_read(paths)
        return n / s / 1e9

    def one_rep(self, rep):
        """Every measurement once: the writes, a settle read, then the reads, rotated by two places
        per repetition."""
        writes = [("stall", self.stall), ("torch_save_s", self.torch_save), ("copy_s", self.copy)]
        reads = [
            ("restore_s", self.restore),
            ("torch_load_s", self.torch_load),
            ("load_s", self.functional_load),
            ("disk_preempt_gbps", lambda: self.disk_read_gbps(self.newest_data_files())),
            ("store_restore_s", self.store_restore),
            ("disk_torch_gbps", lambda: self.disk_read_gbps([self.pt])),
        ]
        # The virtual disk reads slowly for a while after the guest synced gigabytes (the host
        # is still writing them back): an untimed read of both files comes first. It does not
        # always absorb all of it, so the first timed read also changes with each repetition: a
        # slow first read then shows as one outlier in one reader, which the median drops.
        settle = ("disk_settle_gbps", lambda: self.disk_read_gbps(self.newest_data_files() + [self.pt]))
        shift = (2 * rep) % len(reads)
        steps = writes + [settle] + reads[shift:] + reads[:shift]
        out = {}
        for key, fn in steps:
            v = fn()
            if key == "stall":
                out["stall_s"], out["fence_s"], out["persist_s"] = v
            else:
                out[key] = v
        return out

    def close(self):
        self.rt.close()
        self.rt = None
        gc.collect()


def dcp_round(state, root, cold):
    try:
        import torch.distributed.checkpoint as dcp
        dcp_dir = os.path.join(root, "dcp")
        shutil.rmtree(dcp_dir, ignore_errors=True)
        os.makedirs(dcp_dir)
        sd = state.state_dict()
        out = {"dcp_save_s": timed(lambda: dcp.save_state_dict(sd, dcp.FileSystemWriter(dcp_dir), no_dist=True))[0]}
        make_cold(cold, dcp_dir)
        out["dcp_load_s"] = timed(lambda: dcp.load_state_dict(sd, dcp.FileSystemReader(dcp_dir), no_dist=True))[0]
        shutil.rmtree(dcp_dir)
        return out
    except Exception as e:  # absent or incompatible in this torch
        return {"dcp": f"unavailable: {type(e).__name__}: {e}"[:120]}


def bench_size(gib, root, args):
    r = Rounds(gib, root, args)
    reps = []
    for i in range(args.reps):
        reps.append(r.one_rep(i))
        print(f"  {r.nbytes / (1 << 30):.2f} GiB rep {i + 1}/{args.reps}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in reps[-1].items()), flush=True)
    res = {"gib": r.nbytes / (1 << 30), "bytes": r.nbytes, "first_stall_s": r.first_stall_s,
           "reps": reps, **{k: [rep[k] for rep in reps] for k in reps[0]}}
    r.close()
    rt = r.runtime(overlap=False)
    r.stall(rt)  # allocates its staging
    res["stall_no_overlap_s"] = [r.stall(rt)[0] for _ in range(args.reps)]
    rt.close()
    res.update(dcp_round(r.state, root, args.cold))
    shutil.rmtree(r.ck, ignore_errors=True)
    os.remove(r.pt)
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


def spread(values, fmt="{:.3f}"):
    values = values if isinstance(values, list) else [values]
    med = statistics.median(values)
    return (fmt + " (" + fmt + "-" + fmt + ")").format(med, min(values), max(values))


def per_rep(r, fn):
    return [fn(rep) for rep in r["reps"]]


SECONDS = [("plain copy of the tensors (memcpy, one thread)", "copy_s"),
           ("stall: save_async + fence at the next step", "stall_s"), ("  of which the fence", "fence_s"),
           ("stall without overlap (whole copy in save_async)", "stall_no_overlap_s"),
           ("persist (save_async -> committed)", "persist_s"), ("torch.save + fsync", "torch_save_s"),
           ("restore: Runtime.restore into the live module", "restore_s"),
           ("restore: preempt.load into the live state dict", "load_s"),
           ("restore: C++ store alone (_C.Store.restore)", "store_restore_s"),
           ("torch.load + load_state_dict", "torch_load_s"),
           ("torch.distributed.checkpoint save", "dcp_save_s"), ("torch.distributed.checkpoint load", "dcp_load_s")]

# Per-repetition ratios: (label, function of one repetition and the size's bytes).
RATIOS = [
    ("stall: torch.save / preempt (target >= 20)", lambda x, n: x["torch_save_s"] / x["stall_s"]),
    ("restore: torch.load / Runtime.restore (target >= 5)", lambda x, n: x["torch_load_s"] / x["restore_s"]),
    ("restore: torch.load / preempt.load", lambda x, n: x["torch_load_s"] / x["load_s"]),
    ("Runtime.restore / C++ store restore (1 = no Python cost)", lambda x, n: x["restore_s"] / x["store_restore_s"]),
    ("preempt.load / C++ store restore", lambda x, n: x["load_s"] / x["store_restore_s"]),
    ("Runtime.restore / plain read of its files", lambda x, n: x["restore_s"] * x["disk_preempt_gbps"] * 1e9 / n),
    ("torch.load / plain read of its file", lambda x, n: x["torch_load_s"] * x["disk_torch_gbps"] * 1e9 / n),
    ("bound: torch.load / plain read of the preempt files", lambda x, n: x["torch_load_s"] * x["disk_preempt_gbps"] * 1e9 / n),
]


def table(sizes):
    head = "| seconds, median (min-max) | " + " | ".join(f"{r['gib']:.2f} GiB" for r in sizes) + " |"
    lines = [head, "|---|" + "---|" * len(sizes)]
    for label, key in SECONDS:
        cells = [spread(r[key]) if key in r else r.get("dcp", "-") for r in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| **GB/s, median (min-max)** |" + " |" * len(sizes))
    for label, key in (("disk: plain sequential read of the preempt files", "disk_preempt_gbps"),
                       ("disk: plain sequential read of the torch.save file", "disk_torch_gbps"),
                       ("disk: settle read right after the writes (not in any ratio)", "disk_settle_gbps")):
        lines.append(f"| {label} | " + " | ".join(spread(r[key], "{:.2f}") for r in sizes) + " |")
    for label, key in (("Runtime.restore", "restore_s"), ("C++ store restore", "store_restore_s"),
                       ("torch.load + load_state_dict", "torch_load_s")):
        lines.append(f"| {label} | " + " | ".join(
            spread([r["bytes"] / s / 1e9 for s in r[key]], "{:.2f}") for r in sizes) + " |")
    lines.append("| **ratios per repetition, median (min-max)** |" + " |" * len(sizes))
    for label, fn in RATIOS:
        lines.append(f"| {label} | " + " | ".join(
            spread(per_rep(r, lambda x: fn(x, r["bytes"])), "{:.1f}") for r in sizes) + " |")
    lines.append("| first stall (allocates staging), s | " + " | ".join(f"{r['first_stall_s']:.3f}" for r in sizes) + " |")
    return "\n".join(lines)


def parse_args(argv):
    def sizes(text):
        try:
            out = [float(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of GiB") from None
        bad = [x for x in out if not 1 / 16 <= x <= 256]
        if bad:
            raise argparse.ArgumentTypeError(f"size {bad[0]} GiB is outside [0.0625, 256]")
        return out

    def bounded(kind, lo, hi):
        def parse(text):
            try:
                v = kind(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"'{text}' is not a {kind.__name__}") from None
            if not lo <= v <= hi:
                raise argparse.ArgumentTypeError(f"{v} is outside [{lo}, {hi}]")
            return v
        return parse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--sizes", type=sizes, default=[1.0, 4.0], help="GiB of state, comma separated (default 1,4)")
    ap.add_argument("--dir", default="/var/tmp/preempt-bench-python", help="scratch directory on the disk to measure")
    ap.add_argument("--reps", type=bounded(int, 1, 100), default=3, help="interleaved repetitions per size")
    ap.add_argument("--step-s", type=bounded(float, 0.0, 60.0), default=0.5,
                    help="simulated training step the background copy overlaps, seconds")
    ap.add_argument("--cold", choices=("drop", "evict"), default="drop",
                    help="drop: sync + drop_caches (root); evict: fadvise DONTNEED on the files read")
    ap.add_argument("--json", default="", help="also write every measurement there")
    a = ap.parse_args(argv)
    if os.path.exists(a.dir) and not os.path.isdir(a.dir):
        ap.error(f"--dir {a.dir} exists and is not a directory")
    if a.cold == "drop" and not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        ap.error("--cold drop needs root (/proc/sys/vm/drop_caches is not writable); use --cold evict")
    return a


def main(argv=None):
    a = parse_args(argv)
    os.makedirs(a.dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    load = os.getloadavg()
    out = {"torch": torch.__version__, "step_s": a.step_s, "reps": a.reps, "cold": a.cold,
           "loadavg_at_start": load, "sizes": [], **bench_step_end(a.dir)}
    print(f"step_end with nothing due: median {out['step_end_us_median']:.2f} us, min {out['step_end_us_min']:.2f} us")
    for g in a.sizes:
        out["sizes"].append(bench_size(g, a.dir, a))
        print(table(out["sizes"][-1:]))
        sys.stdout.flush()
    out["loadavg_at_end"] = os.getloadavg()
    print(f"\ntorch {torch.__version__}, simulated step {a.step_s} s, {a.reps} interleaved repetitions, "
          f"cold reads: {a.cold}; load average {load[0]:.2f} at the start, {out['loadavg_at_end'][0]:.2f} at the end\n"
          + table(out["sizes"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
