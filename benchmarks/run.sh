#!/usr/bin/env bash
# benchmarks/run.sh — the one benchmark command. In one run, on one directory (one disk):
#   1. fio: O_DIRECT io_uring sequential write (end_fsync=1) and read, bs = chunk size (4 MiB),
#      iodepth = the store's queue depths (8 for writes, 32 for reads), size = the largest store
#      size — the disk's bandwidth the store is held to
#      (run right before and right after bench_store; the mean of the two is the reference);
#   2. bench_store: preempt::Store save (submit → durable COMMIT) and cold restore, plus a memcpy
#      of the same bytes, for each size;
#   3. torch_baseline.py: torch.save+fsync / torch.load of the same tensor mix (/usr/bin/python3);
#   4. every other sub-benchmark built under <build>/benchmarks/*/bench_* (and benchmarks/*/bench_*.py),
#      run with --json <file> (and --quick);
#   5. report.py: merges everything into one JSON file and prints the table with PASS/MISS.
#
# usage: benchmarks/run.sh [--build-dir build] [--dir /tmp/preempt-bench] [--sizes 1,4] [--quick]
#                          [--backend auto|uring|posix] [--out benchmarks/results/latest.json]
#                          [--reps N] [--no-sub] [--no-torch]
# It builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
# --quick: 64 MiB sizes, fio at 64 MiB, sub-benchmarks with --quick; writes
#   benchmarks/results/quick.json (not latest.json) unless --out is given. Meant for smoke tests (< 60 s).
# --reps N: store and torch saves/restores repeated N times, medians reported (default 1).
# Not run here: the SLURM benchmark (lost work with SLURM's preemption vs preempt-slurm-sched, on a
# private test cluster; root, ~8 min): benchmarks/slurm/slurm_bench.py, see docs/slurm.md.
# Sub-benchmarks see PREEMPT_BENCH_DIR, PREEMPT_BENCH_FIO_{WRITE,READ}_GBPS (this run's fio
# bandwidths, GB/s) and, in quick mode only, PREEMPT_BENCH_QUICK=1 in their environment.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
build_dir="build"
bench_dir="${PREEMPT_BENCH_DIR:-/tmp/preempt-bench}"
sizes="1,4"
quick=0
backend="auto"
out=""
run_sub=1
run_torch=1
reps=""
cold_mode=drop   # how reads are made cold; --quick: evict (see drop_caches below)
py=/usr/bin/python3

usage() { sed -n '2,24p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --dir) bench_dir="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --backend) backend="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --no-sub) run_sub=0; shift ;;
    --no-torch) run_torch=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
[[ "$build_dir" = /* ]] || build_dir="$repo/$build_dir"
if [[ -z "$out" ]]; then
  if [[ $quick == 1 ]]; then out="$here/results/quick.json"; else out="$here/results/latest.json"; fi
fi

bench_store="$build_dir/benchmarks/store/bench_store"
if [[ ! -x "$bench_store" ]]; then
  echo "run.sh: $bench_store not found; build it first:" >&2
  echo "  cmake -S $repo -B $build_dir -DCMAKE_BUILD_TYPE=Release && cmake --build $build_dir -j --target bench_store" >&2
  exit 2
fi
command -v fio >/dev/null || { echo "run.sh: fio not found (apt-get install fio)" >&2; exit 2; }
[[ -x "$py" ]] || py="$(command -v python3)"

tmp="$here/results/tmp"
rm -rf "$tmp"
mkdir -p "$tmp" "$bench_dir"
chunk_mib=4
depth=8        # StoreOptions::queue_depth (writes)
read_depth=32  # StoreOptions::read_queue_depth (restores)

quick_flag=()
store_sizes=(--sizes "$sizes")
if [[ $quick == 1 ]]; then
  quick_flag=(--quick)
  store_sizes=()
  cold_mode=evict
  fio_mib=64
else
  # fio size = the largest store size (GiB, may be fractional), in MiB.
  fio_mib="$("$py" -c "import sys; print(max(int(round(float(x) * 1024)) for x in sys.argv[1].split(',')))" "$sizes")"
fi

# Cold reads: "drop" = sync + drop_caches (root; the whole machine's cache), "evict" = only the
# files about to be read (posix_fadvise DONTNEED; no privilege, spares a shared machine's cache).
# Full runs drop (falling back to evict when refused); --quick evicts (dropping would make the
# following python/torch start-up read its libraries from disk again: ~15 s here).
drop_caches() {  # prints how cold the next read is; $1: the file about to be read
  sync
  if [[ $cold_mode == drop ]] && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then echo "cold (drop_caches)"; return; fi
  if "$py" -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fdatasync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$1" 2>/dev/null; then
    echo "cold (file evicted)"
  else
    echo warm
  fi
}

t_start=$(date +%s)
echo "== preempt benchmarks: dir=$bench_dir build=$build_dir $([[ $quick == 1 ]] && echo quick || echo "sizes=${sizes} GiB")"

# ---- 1. fio ---------------------------------------------------------------------------------
fio_file="$bench_dir/fio-seq.dat"
fio_common=(--name=seq --filename="$fio_file" --size="${fio_mib}M" --bs="${chunk_mib}M"
            --direct=1 --ioengine=io_uring --numjobs=1 --group_reporting --output-format=json)
# run_fio <tag>: sequential write (new file, end_fsync=1) then cold read; leaves fio_<rw>_<tag>.json.
run_fio() {
  rm -f "$fio_file"
  sync
  fio "${fio_common[@]}" --iodepth="$depth" --rw=write --end_fsync=1 > "$tmp/fio_write_$1.json" 2> "$tmp/fio_write_$1.err" || {
    echo "run.sh: fio write failed:" >&2; cat "$tmp/fio_write_$1.err" >&2; exit 1; }
  drop_caches "$fio_file" > "$tmp/fio_cache"
  fio "${fio_common[@]}" --iodepth="$read_depth" --rw=read > "$tmp/fio_read_$1.json" 2> "$tmp/fio_read_$1.err" || {
    echo "run.sh: fio read failed:" >&2; cat "$tmp/fio_read_$1.err" >&2; exit 1; }
  rm -f "$fio_file"
  "$py" - "$tmp" "$1" <<'EOF'
import json, sys
t, tag = sys.argv[1], sys.argv[2]
w = json.load(open(f"{t}/fio_write_{tag}.json"))["jobs"][0]["write"]["bw_bytes"] / 1e9
r = json.load(open(f"{t}/fio_read_{tag}.json"))["jobs"][0]["read"]["bw_bytes"] / 1e9
print(f"   fio ({tag}): write {w:.3f} GB/s, read {r:.3f} GB/s ({open(t + '/fio_cache').read().strip()} cache)")
EOF
}
# fio runs right before and right after bench_store (disk bandwidth drifts on shared/virtual
# disks); the reference is the mean of the two, both are kept in the JSON.
echo "-- fio ${fio_mib} MiB (O_DIRECT, io_uring, bs ${chunk_mib} MiB, iodepth $depth write with end_fsync=1, $read_depth read) [+$(( $(date +%s) - t_start ))s]"
run_fio before

# ---- 2. bench_store -------------------------------------------------------------------------
echo "-- bench_store [+$(( $(date +%s) - t_start ))s]"
reps_flag=()
[[ -n "$reps" ]] && reps_flag=(--reps "$reps")
"$bench_store" "${store_sizes[@]}" "${quick_flag[@]}" "${reps_flag[@]}" --dir "$bench_dir" --backend "$backend" \
  --chunk-mib "$chunk_mib" --depth "$depth" --cold "$cold_mode" --json "$tmp/store.json" --mix-out "$tmp/mix.json"

run_fio after
read -r fio_w fio_r < <("$py" - "$tmp" <<'EOF'
import json
import sys
t = sys.argv[1]
def bw(rw, tag):
    return json.load(open(f"{t}/fio_{rw}_{tag}.json"))["jobs"][0][rw]["bw_bytes"] / 1e9
print(f"{(bw('write', 'before') + bw('write', 'after')) / 2:.4f} {(bw('read', 'before') + bw('read', 'after')) / 2:.4f}")
EOF
)

# ---- 3. torch baseline ----------------------------------------------------------------------
if [[ $run_torch == 1 ]]; then
  if "$py" -c "import torch" 2>/dev/null; then
    echo "-- torch baseline ($py) [+$(( $(date +%s) - t_start ))s]"
    "$py" "$here/torch_baseline.py" "${reps_flag[@]}" --mix "$tmp/mix.json" --dir "$bench_dir" --cold "$cold_mode" --json "$tmp/torch_baseline.json" ||
      echo "run.sh: torch baseline failed (recorded as missing)" >&2
  else
    echo "-- torch baseline skipped: $py cannot import torch" >&2
  fi
fi

# ---- 4. other sub-benchmarks ----------------------------------------------------------------
if [[ $run_sub == 1 ]]; then
  export PREEMPT_BENCH_DIR="$bench_dir"
  # Set only in quick mode: some programs treat its mere presence as --quick.
  if [[ $quick == 1 ]]; then export PREEMPT_BENCH_QUICK=1; else unset PREEMPT_BENCH_QUICK; fi
  export PREEMPT_BENCH_FIO_WRITE_GBPS="$fio_w" PREEMPT_BENCH_FIO_READ_GBPS="$fio_r"
  sub_timeout=$([[ $quick == 1 ]] && echo 120 || echo 3600)
  shopt -s nullglob
  for prog in "$build_dir"/benchmarks/*/bench_* "$here"/*/bench_*.py; do
    [[ -f "$prog" && ( -x "$prog" || "$prog" == *.py ) ]] || continue
    name="$(basename "$prog")"; name="${name%.py}"
    [[ "$name" == bench_store || "$name" == *.* ]] && continue
    [[ -e "$tmp/sub-$name.json" ]] && continue  # a built program wins over a same-named script
    echo "-- $name [+$(( $(date +%s) - t_start ))s]"
    cmd=("$prog")
    [[ "$prog" == *.py ]] && cmd=("$py" "$prog")
    rc=0
    timeout "$sub_timeout" "${cmd[@]}" --json "$tmp/sub-$name.json" "${quick_flag[@]}" > "$tmp/sub-$name.log" 2>&1 || rc=$?
    tail -n 25 "$tmp/sub-$name.log"
    if [[ $rc != 0 ]]; then
      echo "run.sh: $name exited with $rc (see $tmp/sub-$name.log)" >&2
      echo "{\"_status\": \"exit code $rc\"}" > "$tmp/sub-$name.json"
    elif [[ ! -s "$tmp/sub-$name.json" ]]; then
      echo "{\"_status\": \"wrote no JSON\"}" > "$tmp/sub-$name.json"
    fi
  done
fi

# ---- 5. merge + table -----------------------------------------------------------------------
t_end=$(date +%s)
"$py" "$here/report.py" --tmp "$tmp" --out "$out" --dir "$bench_dir" --quick "$quick" --wall-s "$((t_end - t_start))"
