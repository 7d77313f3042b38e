#!/usr/bin/python3
"""Merges the pieces of one benchmarks/run.sh run into one flat JSON object and prints the table.

    report.py --tmp benchmarks/results/tmp --out benchmarks/results/latest.json [--dir DIR] [--quick 0|1]
    report.py --show benchmarks/results/latest.json        # table of an earlier run

Keys are named after what they measure (bandwidths in GB/s, 1 GB = 1e9 bytes; times in s):
  meta.*      date, git commit, machine (cpu, cores, memory, kernel, file system of the bench dir)
  fio.*       fio O_DIRECT io_uring sequential write (end_fsync=1) / read bandwidth
  store.*     bench_store: memcpy / save (submit -> durable COMMIT) / cold restore, per size label
  torchpy.*   torch.save+fsync / torch.load of the same tensor mix (/usr/bin/python3)
  ratio.*     store figures divided by their references, per size label
  <name>.*    each other sub-benchmark bench_<name> (nested objects flattened with '.')
  targets     [{name, value, target, pass}] — every target checked in this run
A sub-benchmark may list its own targets in its JSON as "targets": [{"name", "value", "target",
"pass"}]; they are copied into the table as they are. Stdlib only.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import subprocess
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def flatten(prefix, obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "targets" and isinstance(v, list):
                continue
            flatten(f"{prefix}.{k}" if prefix else k, v, out)
    else:
        out[prefix] = obj


def machine_info(bench_dir, repo):
    m = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    m["meta.cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    m["meta.cores"] = os.cpu_count()
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        m["meta.mem_gib"] = round(kb / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    m["meta.kernel"] = platform.release()
    # File system and device of the benchmark directory: the longest matching mount point.
    try:
        real = os.path.realpath(bench_dir)
        best = ("", "", "")
        with open("/proc/mounts") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                mnt = mnt.replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                    best = (dev, mnt, fstype)
        m["meta.fs"] = best[2]
        m["meta.device"] = best[0]
        m["meta.mount"] = best[1]
        st = os.statvfs(bench_dir)
        m["meta.fs_free_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    except OSError:
        pass
    try:
        m["meta.git_commit"] = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True,
                                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        m["meta.git_dirty"] = bool(dirty)
    except (OSError, subprocess.SubprocessError):
        pass
    return m


def merge(args):
    tmp = args.tmp
    r = {"meta.date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
         "meta.quick": bool(int(args.quick)), "meta.bench_dir": args.dir}
    if args.wall_s is not None:
        r["meta.wall_s"] = args.wall_s
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r.update(machine_info(args.dir or tmp, repo))

    # fio ran before and after bench_store; the reference bandwidth is the mean of the runs found.
    runs = {}
    for tag in ("before", "after"):
        fw, fr = load(os.path.join(tmp, f"fio_write_{tag}.json")), load(os.path.join(tmp, f"fio_read_{tag}.json"))
        if fw and fr:
            runs[tag] = (fw, fr)
            r[f"fio.write_gbps_{tag}"] = fw["jobs"][0]["write"]["bw_bytes"] / 1e9
            r[f"fio.read_gbps_{tag}"] = fr["jobs"][0]["read"]["bw_bytes"] / 1e9
            # CPU seconds fio spent (user + system) — to set against the store's save/restore CPU.
            for rw, d in (("write", fw), ("read", fr)):
                j = d["jobs"][0]
                r[f"fio.{rw}_cpu_s_{tag}"] = (j.get("usr_cpu", 0) + j.get("sys_cpu", 0)) / 100 * j.get("job_runtime", 0) / 1e3
    if runs:
        fw, fr = next(iter(runs.values()))
        jw = fw["jobs"][0]
        opts = jw.get("job options", {})
        r["fio.version"] = fw.get("fio version")
        r["fio.size_bytes"] = jw["write"]["io_bytes"]
        r["fio.bs"] = opts.get("bs")
        r["fio.iodepth"] = int(opts.get("iodepth", 0) or 0)
        r["fio.read_iodepth"] = int(fr["jobs"][0].get("job options", {}).get("iodepth", 0) or 0)
        r["fio.runs"] = list(runs)
        r["fio.write_gbps"] = sum(r[f"fio.write_gbps_{t}"] for t in runs) / len(runs)
        r["fio.read_gbps"] = sum(r[f"fio.read_gbps_{t}"] for t in runs) / len(runs)
        try:
            with open(os.path.join(tmp, "fio_cache")) as f:
                r["fio.read_cache"] = f.read().strip()
        except OSError:
            pass

    store = load(os.path.join(tmp, "store.json")) or {}
    flatten("store", store, r)
    tb = load(os.path.join(tmp, "torch_baseline.json")) or {}
    flatten("torchpy", tb, r)

    labels = [s for s in str(store.get("sizes", "")).split(",") if s]
    targets = []

    def ratio(key, num, den):
        if num in r and den in r and r[den]:
            r[key] = r[num] / r[den]
            return r[key]
        return None

    def target(name, value, op_text, threshold, ref, at_most=False):
        if value is None:
            targets.append({"name": name, "value": None, "target": op_text, "pass": None, "ref": ref})
        else:
            ok = value <= threshold if at_most else value >= threshold
            targets.append({"name": name, "value": round(value, 4), "target": op_text, "pass": ok, "ref": ref})

    for L in labels:
        s, rs = f"store.save_gbps_{L}", f"store.restore_gbps_{L}"
        ratio(f"ratio.save_vs_memcpy_{L}", s, f"store.memcpy_gbps_{L}")
        target(f"save {L} / fio write", ratio(f"ratio.save_vs_fio_write_{L}", s, "fio.write_gbps"), ">= 0.9", 0.9,
               "fio.write_gbps")
        target(f"restore {L} / fio read", ratio(f"ratio.restore_vs_fio_read_{L}", rs, "fio.read_gbps"), ">= 0.8", 0.8,
               "fio.read_gbps")
        target(f"save {L} / torch.save+fsync", ratio(f"ratio.save_vs_torch_{L}", s, f"torchpy.save_fsync_gbps_{L}"),
               ">= 2", 2.0, f"torchpy.save_fsync_gbps_{L}")
        v = ratio(f"ratio.restore_vs_torch_{L}", rs, f"torchpy.load_gbps_{L}")
        target(f"restore {L} / torch.load (floor)", v, ">= 2", 2.0, f"torchpy.load_gbps_{L}")
        target(f"restore {L} / torch.load (DESIGN)", v, ">= 5", 5.0, f"torchpy.load_gbps_{L}")
        target(f"frozen 90% {L}: fraction of bytes written", r.get(f"store.frozen_written_frac_{L}"), "<= 0.15", 0.15,
               f"store.frozen_trained_frac_{L}", at_most=True)
        target(f"frozen 90% {L}: full save / deduplicated save", r.get(f"store.frozen_speedup_{L}"), ">= 5", 5.0,
               f"store.frozen_full_s_{L}")

    subs = []
    for path in sorted(glob.glob(os.path.join(tmp, "sub-bench_*.json"))):
        name = os.path.basename(path)[len("sub-bench_"):-len(".json")]
        d = load(path)
        if not isinstance(d, dict):
            d = {"_status": "unreadable JSON"}
        subs.append(name)
        flatten(name, d, r)
        for t in d.get("targets", []) if isinstance(d.get("targets"), list) else []:
            if isinstance(t, dict) and "name" in t:
                targets.append({"name": f"{name}: {t['name']}", "value": t.get("value"), "target": t.get("target", ""),
                                "pass": t.get("pass"), "ref": name})
    r["meta.sub_benchmarks"] = subs
    r["targets"] = targets
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(r, f, indent=2, sort_keys=False)
        f.write("\n")
    return r


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def show(r, out_path=None):
    labels = [s for s in str(r.get("store.sizes", "")).split(",") if s]
    print()
    print(f"preempt benchmarks — {r.get('meta.date_utc')}  commit {str(r.get('meta.git_commit', ''))[:12]}"
          f"{' (dirty)' if r.get('meta.git_dirty') else ''}{'  [QUICK]' if r.get('meta.quick') else ''}")
    print(f"machine: {r.get('meta.cpu', '?')}, {r.get('meta.cores')} cores, {r.get('meta.mem_gib')} GiB, "
          f"kernel {r.get('meta.kernel')}; {r.get('meta.fs')} on {r.get('meta.device')} ({r.get('meta.bench_dir')})")
    print()
    print("bandwidth, GB/s (1e9 B/s)   " + "".join(f"{L:>10}" for L in labels))
    rows = [("memcpy (same bytes)", "store.memcpy_gbps_{}"),
            ("store save→COMMIT", "store.save_gbps_{}"),
            ("store restore", "store.restore_gbps_{}"),
            ("torch.save + fsync", "torchpy.save_fsync_gbps_{}"),
            ("torch.load", "torchpy.load_gbps_{}")]
    for title, key in rows:
        print(f"  {title:<26}" + "".join(f"{fmt(r.get(key.format(L)), 2):>10}" for L in labels))
    size = r.get("fio.size_bytes")
    size_txt = f"{size / 2**20:.0f} MiB" if size else "?"
    print(f"  {'fio write (' + size_txt + ')':<26}{fmt(r.get('fio.write_gbps'), 2):>10}   mean of before "
          f"{fmt(r.get('fio.write_gbps_before'), 2)} / after {fmt(r.get('fio.write_gbps_after'), 2)}; O_DIRECT io_uring bs "
          f"{r.get('fio.bs')} iodepth {r.get('fio.iodepth')} end_fsync=1")
    print(f"  {'fio read (' + size_txt + ')':<26}{fmt(r.get('fio.read_gbps'), 2):>10}   mean of before "
          f"{fmt(r.get('fio.read_gbps_before'), 2)} / after {fmt(r.get('fio.read_gbps_after'), 2)} "
          f"(iodepth {r.get('fio.read_iodepth')}, {r.get('fio.read_cache', '?')} cache)")
    print(f"  reads: store restore {r.get('store.restore_cache', '?')}, torch.load {r.get('torchpy.load_cache', '?')}")
    for L in labels:
        print(f"  store {L}: {fmt(r.get('store.tensors_' + L), 0)} tensors; save = write {fmt(r.get('store.save_write_s_' + L))} s"
              f" + sync {fmt(r.get('store.save_sync_s_' + L))} s + commit {fmt(r.get('store.save_commit_s_' + L))} s"
              f", cpu {fmt(r.get('store.save_cpu_s_' + L))} s ({r.get('store.save_backend_' + L)});"
              f" restore cpu {fmt(r.get('store.restore_cpu_s_' + L))} s; first save's engine setup {fmt(r.get('store.setup_s_' + L))} s")
        if r.get("store.frozen_save_s_" + L) is not None:
            print(f"  store {L} frozen 90 %: full save {fmt(r.get('store.frozen_full_s_' + L))} s, unchanged chunks referenced"
                  f" {fmt(r.get('store.frozen_save_s_' + L))} s ({fmt(100 * r.get('store.frozen_written_frac_' + L), 1)} % written),"
                  f" first after the full one {fmt(r.get('store.frozen_first_s_' + L))} s")
    print()
    tl = r.get("targets", [])
    nw = min(80, max([44] + [len(str(t.get("name"))) + 1 for t in tl]))
    tw = min(40, max([8] + [len(str(t.get("target"))) + 1 for t in tl]))
    print(f"  {'target':<{nw}}{'measured':>10}  {'needs':<{tw}}result")
    for t in tl:
        res = "n/a" if t.get("pass") is None else ("PASS" if t["pass"] else "MISS")
        print(f"  {str(t.get('name')):<{nw}}{fmt(t.get('value'), 2):>10}  {str(t.get('target')):<{tw}}{res}")
    for name in r.get("meta.sub_benchmarks", []):
        st = r.get(f"{name}._status")
        if st:
            print(f"  sub-benchmark bench_{name}: {st}")
    if out_path:
        print(f"\nwritten: {out_path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tmp")
    ap.add_argument("--out")
    ap.add_argument("--dir", default="")
    ap.add_argument("--quick", default="0")
    ap.add_argument("--wall-s", type=int)
    ap.add_argument("--show")
    args = ap.parse_args()
    if args.show:
        r = load(args.show)
        if r is None:
            sys.exit(f"report.py: cannot read {args.show}")
        show(r)
        return
    if not args.tmp or not args.out:
        ap.error("--tmp and --out are required (or --show FILE)")
    show(merge(args), args.out)


if __name__ == "__main__":
    main()
