#!/usr/bin/python3
"""Baseline for bench_store: torch.save + fsync and torch.load of the same tensor mix.

    /usr/bin/python3 benchmarks/torch_baseline.py --mix MIX.json --dir DIR --json OUT.json

MIX.json comes from `bench_store --mix-out` ({"1gib": [nbytes, ...], ...}); every entry becomes a
float32 tensor in one dict, so the byte volume and tensor count are exactly bench_store's.
  save : torch.save(dict, f) into an open file, f.flush(), os.fsync(f)  (the file is new)
  load : torch.load(path), cold: after drop_caches (--cold drop, root) or after evicting the file's
         pages (--cold evict); "warm" when neither is allowed
Bandwidth = payload bytes / seconds, GB/s with 1 GB = 1e9 bytes.
Uses only torch and the standard library.
"""
import argparse
import json
import os
import sys
import time


def make_cold(mode, path):
    """drop: sync + /proc/sys/vm/drop_caches (root). evict: only `path`'s pages (fadvise DONTNEED)."""
    os.sync()
    try:
        if mode == "drop":
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        return True
    except OSError as e:
        print(f"torch_baseline: cannot make the cache cold ({e}); load figures are warm-cache", file=sys.stderr)
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mix", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cold", choices=["drop", "evict"], default="drop")
    args = ap.parse_args()

    import torch  # imported late so --help works without torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    with open(args.mix) as f:
        mix = json.load(f)
    os.makedirs(args.dir, exist_ok=True)
    out = {"bench": "torch_baseline", "torch_version": torch.__version__}
    cold = True
    gen = torch.Generator().manual_seed(0)
    for label, sizes in mix.items():
        state = {}
        for i, n in enumerate(sizes):
            t = torch.empty(n // 4, dtype=torch.float32)
            t.uniform_(generator=gen)
            state[f"model.layer{i:04d}.weight"] = t
        total = sum(sizes)
        path = os.path.join(args.dir, f"torch-{label}.pt")
        save_s, load_s = [], []
        for _ in range(args.reps):
            if os.path.exists(path):
                os.remove(path)
            os.sync()
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            save_s.append(time.perf_counter() - t0)
            cold = make_cold(args.cold, path) and cold
            t0 = time.perf_counter()
            loaded = torch.load(path, map_location="cpu")
            load_s.append(time.perf_counter() - t0)
            if len(loaded) != len(state) or not all(torch.equal(loaded[k], v) for k, v in state.items()):
                sys.exit(f"torch_baseline: {path}: loaded tensors differ from the saved ones")
            del loaded
        os.remove(path)
        sv, ld = sorted(save_s)[len(save_s) // 2], sorted(load_s)[len(load_s) // 2]
        out[f"bytes_{label}"] = total
        out[f"tensors_{label}"] = len(sizes)
        out[f"save_fsync_s_{label}"] = sv
        out[f"save_fsync_gbps_{label}"] = total / sv / 1e9
        out[f"load_s_{label}"] = ld
        out[f"load_gbps_{label}"] = total / ld / 1e9
        print(f"torch {label:>7}: {len(sizes)} tensors, torch.save+fsync {total / sv / 1e9:.2f} GB/s, "
              f"torch.load {total / ld / 1e9:.2f} GB/s ({'cold' if cold else 'warm'} cache)", flush=True)
        del state
    out["load_cache"] = ("cold (drop_caches)" if args.cold == "drop" else "cold (file evicted)") if cold else "warm"
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
