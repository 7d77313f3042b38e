#!/usr/bin/env bash
# A private single-node SLURM cluster for tests and demos: munged, slurmctld and slurmd started as
# root with every file (config, munge key and socket, state, spool, logs, pid files) under one
# directory, on non-default ports, so nothing of a system SLURM or munge is read or touched.
#
#   scripts/slurm/cluster.sh up   DIR [GPUS]   # start; prints `export SLURM_CONF=DIR/etc/slurm.conf`
#   scripts/slurm/cluster.sh down DIR          # stop the daemons by their pid files (idempotent)
#   scripts/slurm/cluster.sh check             # exit 0 when root and the SLURM/munge binaries exist
#
# The node has GPUS (default 4) fake GPUs (`gres.conf`: AutoDetect=off, one empty file per GPU),
# $CPUS CPUs (default: the cores, at least 8)
# and three partitions sharing it: `low` (PriorityTier=1, PreemptMode=REQUEUE, GraceTime=$GRACE_S,
# default 20: SLURM preempts it), `advised` (PriorityTier=1, PreemptMode=OFF: only the scheduler
# backend preempts it, with `scontrol requeue`) and `high` (PriorityTier=10);
# PreemptType=preempt/partition_prio, KillWait=10. SlurmctldParameters=preempt_send_user_signal:
# when a preemption's GraceTime starts, a job submitted with `--signal=[B:]SIG@N` gets SIG (B: the
# batch shell only) instead of the SIGTERM SLURM sends to its steps' tasks; without it the batch
# step is signalled only when the grace ends (docs/slurm.md).
# Ports: $SLURM_TEST_PORT (slurmctld, default 16817) and the next one (slurmd).
# `up` stops whatever it started when a step fails; callers trap `down` for the rest.
set -euo pipefail

cmd=${1:-}
dir=${2:-}

need() { command -v "$1" >/dev/null 2>&1 || { echo "cluster.sh: $1 not found (install slurm-wlm and munge)" >&2; return 1; }; }

check() {
  [[ $(id -u) -eq 0 ]] || { echo "cluster.sh: must run as root (slurmd starts jobs as their user)" >&2; return 1; }
  need munged && need slurmctld && need slurmd && need sbatch && need scontrol && need squeue
}

stop_pid_file() {  # $1 = pid file, $2 = name; TERM, wait up to 10 s, then KILL
  local f=$1 pid
  [[ -s $f ]] || return 0
  pid=$(cat "$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  # Only a process whose command is the daemon we started (pid reuse after a crash).
  if [[ -r /proc/$pid/comm ]] && [[ $(cat /proc/$pid/comm) == "$2"* ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  [[ -n $dir && -d $dir ]] || { echo "cluster.sh down: no directory '$dir'" >&2; return 1; }
  # Jobs first (their processes are children of slurmd's stepds), then the daemons.
  if [[ -s $dir/run/slurmctld.pid && -f $dir/etc/slurm.conf ]]; then
    SLURM_CONF=$dir/etc/slurm.conf timeout 10 scancel --full --quiet --user=root 2>/dev/null || true
  fi
  stop_pid_file "$dir/run/slurmd.pid" slurmd
  # slurmstepd processes of this cluster (if slurmd died before them): matched by our spool dir.
  for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
    if tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "SLURM_CONF=$dir/etc/slurm.conf"; then
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  stop_pid_file "$dir/run/slurmctld.pid" slurmctld
  stop_pid_file "$dir/run/munged.pid" munged
}

write_config() {
  local gpus=$1 grace=$2 port=$3 host cpus mem
  host=$(hostname -s)
  # config_overrides: more CPUs than cores is fine for tests (CPUS overrides, e.g. for many jobs)
  cpus=${CPUS:-$(( $(nproc) > 8 ? $(nproc) : 8 ))}
  [[ $cpus =~ ^[1-9][0-9]*$ ]] || { echo "cluster.sh: CPUS '$cpus' must be a positive integer" >&2; return 2; }
  mem=$(awk '/MemTotal/ {print int($2/1024/2)}' /proc/meminfo)
  mkdir -p "$dir"/{etc,run,state,spool,log,munge,gpu}
  for i in $(seq 0 $((gpus - 1))); do : >"$dir/gpu/gpu$i"; done
  cat >"$dir/etc/slurm.conf" <<CONF
ClusterName=preempt-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SlurmdParameters=config_overrides
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
JobRequeue=1
KillWait=10
MinJobAge=600
InactiveLimit=0
MessageTimeout=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN
PartitionName=low Nodes=$host Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=$grace MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=advised Nodes=$host PriorityTier=1 PreemptMode=OFF MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=high Nodes=$host PriorityTier=10 MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  {
    echo "AutoDetect=off"
    for i in $(seq 0 $((gpus - 1))); do echo "NodeName=$host Name=gpu File=$dir/gpu/gpu$i"; done
  } >"$dir/etc/gres.conf"
  : # no cgroup.conf: slurmd autodetects the cgroup version (unused with proctrack/pgid, task/none)
}

wait_for() {  # $1 = seconds, rest = command
  local n=$(( $1 * 10 )); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

up() {
  local gpus=${3:-4} grace=${GRACE_S:-20} port=${SLURM_TEST_PORT:-16817}
  [[ -n $dir ]] || { echo "usage: cluster.sh up DIR [GPUS]" >&2; return 2; }
  [[ $gpus =~ ^[1-9][0-9]*$ ]] || { echo "cluster.sh: GPUS '$gpus' must be a positive integer" >&2; return 2; }
  check
  mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
  write_config "$gpus" "$grace" "$port"
  trap 'echo "cluster.sh: start failed; logs in $dir/log" >&2; down' ERR
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0755 "$dir/munge"; chmod 0400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
         --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" \
         --num-threads=2
  wait_for 10 test -S "$dir/munge/munge.socket"
  export SLURM_CONF=$dir/etc/slurm.conf
  slurmctld -c -f "$SLURM_CONF"     # -c: clean start (no state from an earlier run)
  wait_for 20 scontrol ping
  slurmd -f "$SLURM_CONF" -N "$(hostname -s)"
  # Ready when the node accepts jobs.
  if ! wait_for 30 bash -c "sinfo -h -N -o '%t' | grep -Eq '^(idle|mix|alloc)'"; then
    echo "cluster.sh: node did not come up: $(sinfo -h -N -o '%t %E' 2>&1)" >&2
    false
  fi
  trap - ERR
  echo "export SLURM_CONF=$SLURM_CONF"
}

case $cmd in
  up) up "$@" ;;
  down) down ;;
  check) check ;;
  *) echo "usage: cluster.sh up DIR [GPUS] | down DIR | check" >&2; exit 2 ;;
esac
