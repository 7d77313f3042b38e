"""Rank 0's preempt.hints/1 file (docs/hints.md): what preempting this job would cost now.

The file is written by the C++ core (atomic replace, schema checked); this class keeps the
measurements: step time (EWMA), recent checkpoint costs (p95 of the last 20), the last commit.
"""

import os
import time

from . import _C

_WINDOW = 20


def _p95(values):
    if not values:
        return 0.0
    s = sorted(values)
    return s[max(0, -(-len(s) * 95 // 100) - 1)]


class HintsPublisher:
    def __init__(self, path, job, grace_s, gpus, margin=1.25):
        self.path, self.job, self.grace_s, self.gpus, self.margin = path, job, grace_s, gpus, margin
        self.samples = []  # (bytes, stall_s, persist_s)
        self.step, self.step_time_s = 0, 0.0
        self.last_step_at = None
        self.last_commit = {"step": -1, "unix": 0.0, "path": ""}
        self.last_commit_at = time.monotonic()
        self.request_ack = 0  # the newest checkpoint request a durable commit answered

    def on_step(self, step):
        now = time.monotonic()
        if self.last_step_at is not None:
            dt = now - self.last_step_at
            self.step_time_s = dt if self.step_time_s == 0 else 0.9 * self.step_time_s + 0.1 * dt
        self.last_step_at = now
        self.step = step + 1

    def on_commit(self, step, path, nbytes, stall_s, persist_s):
        self.samples = (self.samples + [(nbytes, stall_s, persist_s)])[-_WINDOW:]
        self.last_commit = {"step": int(step), "unix": time.time(), "path": path}
        self.last_commit_at = time.monotonic()

    def publish(self, state, lost_work_s=None):
        cost = {"bytes": int(_p95([s[0] for s in self.samples])), "drain_s": 0.0,
                "stall_s": _p95([s[1] for s in self.samples]), "persist_s": _p95([s[2] for s in self.samples])}
        needed = self.margin * (cost["stall_s"] + cost["persist_s"]) + 1.0 if self.samples else 0.0
        if lost_work_s is None:
            lost_work_s = time.monotonic() - self.last_commit_at
        try:
            _C.publish_hints(self.path, {
                "job": self.job, "state": state, "step": int(self.step), "step_time_s": self.step_time_s,
                "last_commit": self.last_commit, "cost": cost, "grace": {"needed_s": needed, "granted_s": self.grace_s},
                "lost_work_s": lost_work_s, "gpus": self.gpus, "request_ack": int(self.request_ack)})
        except _C.Error as e:  # hints are advisory: training goes on
            print(f"[preempt] hints: {e}", flush=True)


def default_job(dir):
    return os.environ.get("PREEMPT_JOB") or os.path.basename(os.path.normpath(dir)) or "job"
