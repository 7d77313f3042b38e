#!/usr/bin/env bash
# demo-preempt.sh — preemption, end to end, with a 2-rank gloo trainer (the README's loop plus a
# loss log and progress files: tests/runtime/trainer_worker.cc):
#   1. an uninterrupted reference run (loss curve A);
#   2. the same job, SIGTERM to ONE rank mid-run: every rank stops at the same step, the stop
#      checkpoint is committed, the job exits 143 well before the grace period ends;
#   3. the relaunch resumes from the committed step and finishes; its loss curve (B) is compared
#      with A line by line (bit-exact hex floats) and the final weights are compared bit for bit.
#
# usage: scripts/demo-preempt.sh [--build-dir build] [--world 2] [--steps 120] [--kill-at 50]
# Build first: cmake -S . -B build && cmake --build build --target preempt_trainer_worker
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build"
world=2
steps=120
kill_at=50
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --kill-at) kill_at="$2"; shift 2 ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
trainer="$build/tests/runtime/preempt_trainer_worker"
[[ -x "$trainer" ]] || { echo "demo: $trainer not built (cmake --build $build --target preempt_trainer_worker)"; exit 2; }
work="$(mktemp -d /tmp/preempt-demo-XXXXXX)"
export PREEMPT_GRACE_S="${PREEMPT_GRACE_S:-30}" PREEMPT_LOG_LEVEL="${PREEMPT_LOG_LEVEL:-info}"
echo "== work dir $work, $world ranks, $steps steps, grace ${PREEMPT_GRACE_S}s (PREEMPT_GRACE_S)"

launch() {  # launch <name> <ckpt dir> <loss file>
  local name=$1 ck=$2 loss=$3 r
  pids=()
  for ((r = 0; r < world; r++)); do
    "$trainer" --rank $r --world "$world" --rendezvous "$work/rdzv-$name" --dir "$ck" --steps "$steps" \
      --every 25 --sleep-ms 20 --loss-log "$loss" --hints "$work/hints-$name.json" > "$work/$name.rank$r.log" 2>&1 &
    pids+=($!)
  done
}
# Not in a $(...) subshell: only this shell can wait for its children. Sets $codes.
wait_all() { local p rc list=(); for p in "${pids[@]}"; do rc=0; wait "$p" || rc=$?; list+=("$rc"); done; codes="${list[*]}"; }

echo "== 1. reference run (never interrupted)"
launch ref "$work/ckpt-ref" "$work/loss-ref.txt"
wait_all
echo "   exit codes: $codes"

echo "== 2. same job; SIGTERM to rank $((world - 1)) only, after step $kill_at"
launch run1 "$work/ckpt" "$work/loss.txt"
victim=${pids[$((world - 1))]}
until [[ -s "$work/ckpt/.rank$((world - 1)).progress" && $(cat "$work/ckpt/.rank$((world - 1)).progress") -ge $kill_at ]]; do sleep 0.01; done
t0=$(date +%s.%N)
kill -TERM "$victim"
wait_all
t1=$(date +%s.%N)
echo "   exit codes: $codes (143 = stopped with a committed checkpoint), $(python3 -c "print(f'{$t1-$t0:.2f}')") s after SIGTERM"
grep -h "stop agreed\|stop checkpoint\|stopped at step" "$work"/run1.rank*.log | sed 's/^/   /'
echo "   on disk: $(ls "$work/ckpt" | tr '\n' ' ')"
echo "   hints:   $(cat "$work/hints-run1.json")"

echo "== 3. relaunch: resume from the committed step"
launch run2 "$work/ckpt" "$work/loss.txt"
wait_all
echo "   exit codes: $codes"
grep -h "start step" "$work"/run2.rank*.log | sed 's/^/   /'

echo "== loss curve (step, interrupted+resumed vs reference), around the stop:"
stop=$(grep -ho "stopped at step [0-9]*" "$work/run1.rank0.log" | grep -o "[0-9]*$")  # completed steps
paste -d' ' <(awk '{print $2, $5}' "$work/loss.txt") <(awk '{print $5}' "$work/loss-ref.txt") |
  awk -v s="$stop" '$1 >= s-4 && $1 <= s+3 {printf "   step %4d  resumed %-12s reference %-12s %s\n", $1, $2, $3, ($1==s?"<- first step after relaunch":"")}'
if cmp -s "$work/loss.txt" "$work/loss-ref.txt"; then
  echo "== loss curves IDENTICAL (all $steps steps, bit-exact hex floats)"
else
  echo "== loss curves DIFFER"; diff "$work/loss.txt" "$work/loss-ref.txt" | head; exit 1
fi
a=$(grep -ho "final .*" "$work/ref.rank0.log"); b=$(grep -ho "final .*" "$work/run2.rank0.log")
[[ "$a" == "$b" ]] && echo "== final weights identical ($a)" || { echo "== final weights differ: $a vs $b"; exit 1; }
