#!/usr/bin/env python3
"""Lost work under SLURM: SLURM's own preemption vs the scheduler backend, measured and simulated.

    sudo benchmarks/slurm/slurm_bench.py [--build-dir build] [--out benchmarks/slurm/results]

Root (it starts a private single-node SLURM cluster with scripts/slurm/cluster.sh, 8 fake GPUs,
and always stops it). Builds nothing: build `slurm_standin_trainer preempt-slurm-sched
preempt-sched` first. About 7-8 minutes.

The workload (WORKLOAD below): seven stand-in trainers (benchmarks/slurm/standin_trainer.cc:
real preempt::Store checkpoints of 16-128 MiB every 15-150 s, save times of 1-30 s, restores of
1-5 s) fill the 8 GPUs; four high-priority jobs arrive over about two minutes and each runs 20 s.
It runs twice on the same cluster, one phase after the other:
  slurm    the trainers in partition `low` (PreemptMode=REQUEUE, GraceTime=GRACE_S):
           SLURM chooses the victims and sends SIGTERM; a trainer whose save does not fit is
           killed and loses the work since its last commit;
  backend  the trainers in partition `advised` (PreemptMode=OFF) with `preempt-slurm-sched watch`:
           victims by least lost work, checkpoint-then-evict (`scontrol requeue` after the commit).
Lost GPU-seconds come from the trainers' own commit logs: for every run that a preemption ended,
the time from the snapshot of the commit the next run resumed from to the run's last log line
(or all of the run when it committed nothing), plus the next run's restore, times its GPUs.
High-priority wait: submit to the job's first line. The simulator (`preempt-sched simulate`) gets
the same jobs as a trace: policy `k8s` with GraceTime as the grace models SLURM's own preemption
(SIGTERM, save if it fits, else killed when GraceTime ends; its victim order is Kubernetes', not
SLURM's), policy `hint` with the backend's policy JSON (KillWait, the grace of a requeue, is
GraceTime here too).
Targets: lost work >= 50 % lower with the backend, high-priority wait no worse, simulator within
20 % of the measured lost work.
"""

import argparse
import csv
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

GRACE_S = 10       # partition low's GraceTime
KILL_WAIT_S = 10   # cluster.sh's KillWait (the grace of `scontrol requeue`)
GPUS = 8
HORIZON_S = 190    # each phase: low jobs run this long after the first arrival's clock starts
# name, gpus, state MiB, checkpoint every (s), save (slow-storage transfer, s), restore (s), step ms
WORKLOAD = [
    ("a", 1, 16, 15, 1, 1, 100),
    ("b", 1, 32, 30, 3, 2, 100),
    ("c", 1, 32, 45, 6, 2, 100),
    ("d", 1, 64, 60, 10, 3, 200),
    ("e", 1, 64, 90, 16, 3, 200),
    ("f", 1, 128, 120, 24, 4, 200),
    ("g", 2, 128, 150, 30, 5, 250),
]
# Submission order (random.Random(2).shuffle of the names). SLURM's partition_prio preempts the
# oldest jobs (lowest ids) first here; listed in WORKLOAD's order, which sorts by checkpoint cost,
# the cheapest would always be its victims by construction.
SUBMIT_ORDER = "cdbefag"
# name, submit offset (s), gpus, run time (s)
HIGH = [("h1", 20, 2, 20), ("h2", 55, 3, 20), ("h3", 90, 2, 20), ("h4", 125, 4, 20)]
POLICY_JSON = json.dumps({
    "min_runtime_s": 15, "cooldown_s": 0, "kill_now_max_lost_s": 3, "reserved_headroom": 0,
    "restore_s": 3, "tolerable_kill_max_lost_s": 20, "nonhigh_preempt_delay_s": 0,
    "defrag_max_moves": 0,
})


def sh(cmd, env=None, check=True, timeout=60):
    r = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def free_port():
    for _ in range(50):
        port = random.randint(20000, 39000)
        ok = True
        for p in (port, port + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
        if ok:
            return port
    raise RuntimeError("no free port pair")


def job_states(env):
    out = sh("squeue -h -o '%i %T'", env=env, check=False)
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_until(pred, timeout_s, poll_s=0.5):
    end = time.time() + timeout_s
    while time.time() < end:
        if pred():
            return True
        time.sleep(poll_s)
    return pred()


def run_phase(mode, args, env, work):
    """One phase; returns the per-job logs' directory and the high jobs' submit/start times."""
    d = os.path.join(work, mode)
    os.makedirs(d)
    part = "low" if mode == "slurm" else "advised"
    grace = GRACE_S if mode == "slurm" else KILL_WAIT_S
    trainer = os.path.join(args.build_dir, "benchmarks/slurm/slurm_standin_trainer")
    ids = []
    for name, gpus, mib, every, persist, restore, step_ms in sorted(WORKLOAD, key=lambda w: SUBMIT_ORDER.index(w[0])):
        script = os.path.join(d, name + ".sh")
        with open(script, "w") as f:
            f.write(f"#!/bin/bash\nexport PREEMPT_GRACE_S={grace}\nexec {trainer} --dir {d}/{name}.ckpt "
                    f"--log {d}/{name}.log --hints {d}/$SLURM_JOB_ID.hints.json --state-mib {mib} "
                    f"--every-s {every} --persist-s {persist} --restore-s {restore} --step-ms {step_ms} "
                    f"--gpus {gpus} --grace-s {grace}\n")
        os.chmod(script, 0o755)
        ids.append(sh(f"sbatch --parsable -p {part} -J {name} --gres=gpu:{gpus} --open-mode=append "
                      f"-o {d}/{name}.out {script}", env=env).strip())
    if not wait_until(lambda: all(job_states(env).get(i) == "RUNNING" for i in ids), 60):
        raise RuntimeError(f"{mode}: the low jobs did not all start: {job_states(env)}")
    watch = None
    if mode == "backend":
        watch = subprocess.Popen(
            [os.path.join(args.build_dir, "src/slurm/preempt-slurm-sched"), "watch", "--partitions", "advised,high",
             "--interval", "1", "--hints-dir", d, "--policy-json", POLICY_JSON],
            env=env, stdout=open(os.path.join(d, "watch.log"), "w"), stderr=subprocess.STDOUT)
    t0 = time.time()
    high = {}
    try:
        for name, at, gpus, run_s in HIGH:
            time.sleep(max(0.0, t0 + at - time.time()))
            start_file = os.path.join(d, name + ".start")
            submit = time.time()
            jid = sh(f"sbatch --parsable -p high -J {name} --gres=gpu:{gpus} -o /dev/null "
                     f"--wrap 'date +%s.%N > {start_file}; sleep {run_s}'", env=env).strip()
            high[name] = {"id": jid, "submit": submit, "start_file": start_file}
        time.sleep(max(0.0, t0 + HORIZON_S - time.time()))
        wait_until(lambda: all(os.path.exists(h["start_file"]) for h in high.values()), 60)
        wait_until(lambda: all(job_states(env).get(h["id"]) is None for h in high.values()), 60)
    finally:
        if watch:
            watch.send_signal(signal.SIGINT)
            watch.wait(timeout=20)
        sh("scancel --user=root", env=env, check=False)
        wait_until(lambda: not job_states(env), 40)
    for h in high.values():
        try:
            h["start"] = float(open(h["start_file"]).read().strip())
        except (OSError, ValueError):
            h["start"] = None
    return d, high, t0


def parse_runs(path):
    runs, cur = [], None
    for line in open(path):
        f = line.split()
        if len(f) < 4:
            continue
        kind, t, step = f[0], float(f[1]), int(f[3])
        if kind == "start":
            cur = {"start": t, "train": None, "resumed": 0, "commits": [], "end": t, "exit": False,
                   "sigterm": None}
            runs.append(cur)
            continue
        if cur is None:
            continue
        cur["end"] = t
        if kind == "train":
            cur["train"], cur["resumed"] = t, step
        elif kind == "commit":
            cur["commits"].append((step, float(f[5])))
        elif kind == "sigterm":
            cur["sigterm"] = t
        elif kind == "exit":
            cur["exit"] = True
    return runs


def lost_from_logs(d):
    """Lost GPU-seconds, preemptions and SIGKILLed runs, from the commit logs of one phase."""
    lost, preemptions, killed = 0.0, 0, 0
    per_job = {}
    for name, gpus, *_ in WORKLOAD:
        runs = parse_runs(os.path.join(d, name + ".log"))
        job_lost = 0.0
        for i, run in enumerate(runs[:-1]):  # the last run was cancelled at the end of the phase
            nxt = runs[i + 1]
            preemptions += 1
            killed += 0 if run["exit"] else 1
            # From the snapshot of the commit the next run resumed from (none from this run: all of
            # it is lost) to this run's last line, then the next run's restore.
            snap = next((u for s, u in run["commits"] if s == nxt["resumed"]), None)
            job_lost += run["end"] - (snap if snap is not None else run["start"])
            job_lost += (nxt["train"] or nxt["end"]) - nxt["start"]
        per_job[name] = job_lost * gpus
        lost += job_lost * gpus
    return lost, preemptions, killed, per_job


def simulate(args, work, t0_high):
    trace = os.path.join(work, "trace.csv")
    with open(trace, "w") as f:
        f.write("id,submit_s,class,queue,gpus,duration_s,ckpt_interval_s,ckpt_drain_s,ckpt_stall_s,"
                "ckpt_persist_s,restore_s\n")
        for name, gpus, mib, every, persist, restore, _ in sorted(WORKLOAD, key=lambda w: SUBMIT_ORDER.index(w[0])):
            # The store's real write adds about 0.1 s; a start adds about 0.5 s to the restore.
            f.write(f"{name},0,low,low,{gpus},{HORIZON_S},{every},0,0.01,{persist + 0.1},{restore + 0.5}\n")
        for name, at, gpus, run_s in HIGH:
            f.write(f"{name},{at + t0_high},high,high,{gpus},{run_s},600,0,0,0,0\n")
    out = os.path.join(work, "sim.csv")
    sh(f"{args.build_dir}/src/sched/preempt-sched simulate --trace {trace} --nodes 1 --gpus-per-node {GPUS} "
       f"--policies k8s,hint --grace {GRACE_S} --policy-json '{POLICY_JSON}' --csv {out}")
    rows = {r["policy"]: r for r in csv.DictReader(open(out))}
    return {p: {"lost_gpu_s": float(rows[p]["lost_gpu_hours"]) * 3600,
                "high_wait_mean_s": float(rows[p]["high_wait_mean_s"]),
                "preemptions": int(float(rows[p]["preemptions"]))} for p in ("k8s", "hint")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--out", default="", help="directory for results.json and the logs (default: a temp dir, removed)")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
    cluster = os.path.join(repo, "scripts/slurm/cluster.sh")
    r = subprocess.run([cluster, "check"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"slurm_bench: no private SLURM cluster here: {r.stderr.strip()}")
    for exe in ("benchmarks/slurm/slurm_standin_trainer", "src/slurm/preempt-slurm-sched", "src/sched/preempt-sched"):
        if not os.access(os.path.join(args.build_dir, exe), os.X_OK):
            sys.exit(f"slurm_bench: {args.build_dir}/{exe} is not built")
    work = tempfile.mkdtemp(prefix="preempt-slurm-bench.")
    cdir = os.path.join(work, "cluster")
    env = dict(os.environ, SLURM_TEST_PORT=str(free_port()), GRACE_S=str(GRACE_S), CPUS="32",
               PREEMPT_LOG_LEVEL="warn")
    t_begin = time.time()
    try:
        sh(f"{cluster} up {cdir} {GPUS}", env=env, timeout=120)
        env["SLURM_CONF"] = os.path.join(cdir, "etc/slurm.conf")
        measured = {}
        for mode in ("slurm", "backend"):
            d, high, t0 = run_phase(mode, args, env, work)
            lost, preemptions, killed, per_job = lost_from_logs(d)
            waits = [h["start"] - h["submit"] for h in high.values() if h["start"] is not None]
            measured[mode] = {"lost_gpu_s": lost, "preemptions": preemptions, "killed_runs": killed,
                              "lost_by_job": per_job, "high_started": len(waits),
                              "high_wait_mean_s": sum(waits) / len(waits) if waits else float("nan"),
                              "high_wait_max_s": max(waits) if waits else float("nan"),
                              "high": {n: {"submit_s": h["submit"] - t0, "wait_s": (h["start"] - h["submit"]) if h["start"] else None}
                                       for n, h in high.items()}}
            print(f"[slurm_bench] phase {mode} done ({time.time() - t_begin:.0f} s)", flush=True)
    finally:
        sh(f"{cluster} down {cdir}", env=env, check=False, timeout=120)
    sim = simulate(args, work, 0)
    table = [("", "SLURM preemption", "backend", "change")]
    ms, mb = measured["slurm"], measured["backend"]
    table.append(("lost GPU-s, measured", f"{ms['lost_gpu_s']:.0f}", f"{mb['lost_gpu_s']:.0f}",
                  f"{(mb['lost_gpu_s'] / ms['lost_gpu_s'] - 1) * 100:+.0f} %" if ms["lost_gpu_s"] else "-"))
    table.append(("lost GPU-s, simulated", f"{sim['k8s']['lost_gpu_s']:.0f}", f"{sim['hint']['lost_gpu_s']:.0f}", ""))
    table.append(("simulated / measured",
                  f"{sim['k8s']['lost_gpu_s'] / ms['lost_gpu_s'] * 100:.0f} %" if ms["lost_gpu_s"] else "-",
                  f"{sim['hint']['lost_gpu_s'] / mb['lost_gpu_s'] * 100:.0f} %" if mb["lost_gpu_s"] else "-", ""))
    table.append(("high wait mean s, measured", f"{ms['high_wait_mean_s']:.1f}", f"{mb['high_wait_mean_s']:.1f}", ""))
    table.append(("high wait max s, measured", f"{ms['high_wait_max_s']:.1f}", f"{mb['high_wait_max_s']:.1f}", ""))
    table.append(("high wait mean s, simulated", f"{sim['k8s']['high_wait_mean_s']:.1f}",
                  f"{sim['hint']['high_wait_mean_s']:.1f}", ""))
    table.append(("preemptions, measured (simulated)", f"{ms['preemptions']} ({sim['k8s']['preemptions']})",
                  f"{mb['preemptions']} ({sim['hint']['preemptions']})", ""))
    table.append(("runs ended by SIGKILL", str(ms["killed_runs"]), str(mb["killed_runs"]), ""))
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    lost_ok = ms["lost_gpu_s"] > 0 and mb["lost_gpu_s"] <= 0.5 * ms["lost_gpu_s"]
    wait_ok = mb["high_wait_mean_s"] <= ms["high_wait_mean_s"] and mb["high_started"] == len(HIGH)
    sim_ok = all(abs(sim[p]["lost_gpu_s"] - m["lost_gpu_s"]) <= 0.2 * m["lost_gpu_s"]
                 for p, m in (("k8s", ms), ("hint", mb)) if m["lost_gpu_s"] > 0)
    for what, ok in (("lost work >= 50 % lower with the backend", lost_ok),
                     ("high-priority wait no worse", wait_ok),
                     ("simulator within 20 % of measured lost work", sim_ok)):
        print(f"{'PASS' if ok else 'MISS'}  {what}")
    print(f"total {time.time() - t_begin:.0f} s")
    result = {"measured": measured, "simulated": sim, "targets": {"lost": lost_ok, "wait": wait_ok, "sim": sim_ok},
              "workload": WORKLOAD, "high": HIGH, "policy": json.loads(POLICY_JSON), "grace_s": GRACE_S,
              "kill_wait_s": KILL_WAIT_S}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "slurm_bench.json"), "w") as f:
            json.dump(result, f, indent=1)
        shutil.copytree(work, os.path.join(args.out, "logs"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.ckpt", "cluster"))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
