#!/usr/bin/env bash
# Runs a test program on a private single-node SLURM cluster (scripts/slurm/cluster.sh): starts
# the cluster, runs "$@" with SLURM_CONF pointing at it, and stops it on every exit path.
# Exit 77 (ctest's SKIP_RETURN_CODE) with a message when not root or SLURM/munge is missing.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$root/scripts/slurm/cluster.sh
if ! why=$("$cluster" check 2>&1); then
  echo "SKIP: no private SLURM cluster here: $why"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/preempt-slurm.XXXXXX")
cleanup() {
  "$cluster" down "$dir" >/dev/null 2>&1 || true
  if [[ ${rc:-1} -ne 0 ]]; then
    echo "--- slurmctld.log (tail) ---"; tail -n 40 "$dir/log/slurmctld.log" 2>/dev/null
    echo "--- slurmd.log (tail) ---"; tail -n 20 "$dir/log/slurmd.log" 2>/dev/null
  fi
  [[ -n ${PREEMPT_KEEP_TEST_DIRS:-} ]] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'rc=143; exit 143' TERM INT HUP
# A free port pair for slurmctld and slurmd (several clusters may run on one machine).
for _ in $(seq 50); do
  port=$(( 20000 + RANDOM % 20000 ))
  ss -Htln 2>/dev/null | awk '{print $4}' | grep -Eq ":($port|$((port + 1)))\$" || break
done
if ! SLURM_TEST_PORT=$port GRACE_S=${GRACE_S:-20} "$cluster" up "$dir" >"$dir.up.log" 2>&1; then
  cat "$dir.up.log"; rm -f "$dir.up.log"; rc=1; exit 1
fi
rm -f "$dir.up.log"
export SLURM_CONF=$dir/etc/slurm.conf
# Bounded here, below ctest's TIMEOUT, so that a hung test still reaches the cleanup above
# (ctest kills a test past its TIMEOUT without a chance to trap).
timeout --kill-after=10 "${PREEMPT_SLURM_TEST_TIMEOUT_S:-600}" "$@"
rc=$?
exit $rc
