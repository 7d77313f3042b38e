"""preempt.Runtime — the per-step façade, with the same words as the C++ `preempt::Runtime`.

    rt = preempt.Runtime("/nvme/ckpt/job-42", every_steps=500)
    rt.track("model", model); rt.track("optim", optimizer); rt.track("data", loader)
    step = rt.restore()                          # 0 when there is nothing to resume
    for step in range(step, total):
        train_one_step()
        if rt.step_end(step) == preempt.STOP: break
    sys.exit(rt.exit_code())

`step_end(step)` is called by every rank after step `step` (0-based) completed. A checkpoint taken
there holds the state after `step + 1` steps and is stored as step `step + 1`, which is what
`restore()` returns. Every `check_every` steps the ranks exchange one small all_reduce(MAX) of
[stop, checkpoint, -remaining_ms] over the default `torch.distributed` process group, so a SIGTERM
that reached one rank stops every rank after the same step. On a stop: the state is written from
the live tensors (no staging copy), every rank waits for its part to be durable (GIL released),
rank 0 writes COMMIT, and one more all_reduce tells every rank whether the commit happened.

Exit codes (`exit_code()`): 0 trained to the end; 143 stopped on a signal and the stop checkpoint
is committed (relaunch to resume); 75 stopped but not committed (the previous checkpoint stays).

Thread-safety: the training thread only.
"""

import enum
import os
import sys
import time

import torch
import torch.distributed as dist

from . import _C
from ._data import ResumableLoader
from ._hints import HintsPublisher, default_job
from ._state import TrainingState

EXIT_PREEMPTED = 143
EXIT_STOP_FAILED = 75
_NO_DEADLINE_MS = 1 << 60


class Action(enum.IntEnum):
    CONTINUE = 0    # nothing happened (the common case)
    CHECKPOINT = 1  # a checkpoint was staged at this step and is persisting in the background
    STOP = 2        # every rank stops after this step; the stop checkpoint is done (see exit_code())


CONTINUE, CHECKPOINT, STOP = Action.CONTINUE, Action.CHECKPOINT, Action.STOP

def _looks_like_checkpoint_root(path):
    """None when `path` is absent, empty or holds preempt checkpoints; else the first foreign name."""
    if not os.path.exists(path):
        return None
    if not os.path.isdir(path):
        return os.path.basename(path)
    for name in sorted(os.listdir(path)):
        if not _C.is_store_root_entry(name):  # the store's own rule for what it keeps there
            return name
    return None


class _Group:
    """Rank, world size and the small collectives, over the default process group (or none)."""

    def __init__(self, process_group):
        self.pg = process_group
        self.active = dist.is_available() and dist.is_initialized()
        if self.active:
            self.rank = dist.get_rank(process_group)
            self.world_size = dist.get_world_size(process_group)
            backend = dist.get_backend(process_group)
            self.device = (torch.device("cuda", torch.cuda.current_device())
                           if backend == "nccl" else torch.device("cpu"))
        else:
            # torchrun sets RANK / WORLD_SIZE; without a process group only a single rank can agree.
            world = int(os.environ.get("WORLD_SIZE", "1"))
            if world > 1:
                raise _C.InvalidArgumentError(
                    f"Runtime: WORLD_SIZE={world} but torch.distributed is not initialized; call "
                    "torch.distributed.init_process_group() before creating the Runtime")
            self.rank, self.world_size, self.device = 0, 1, torch.device("cpu")

    def max(self, values):
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.pg)
        return t.tolist()


class Runtime:
    """See the module docstring. Keyword arguments:

    every_steps / every_seconds  periodic asynchronous checkpoints (0: off)
    keep_last                    committed checkpoints kept
    check_every                  steps between stop/checkpoint agreements across ranks
    grace_s, reserve_s           grace period and reserve (default: env PREEMPT_GRACE_S, 30 s)
    stop_signals                 e.g. "TERM,USR1" (default: env PREEMPT_STOP_SIGNALS, SIGTERM)
    checkpoint_signals           default SIGUSR2 ("0": none)
    install_signal_handlers      False: the caller uses request_stop() itself
    process_group                default: torch.distributed's default group when initialized
    staging_buffers              1 or 2 (a periodic snapshot while the previous one persists)
    track_rng                    torch CPU/CUDA, `random` and NumPy generators (default True)
    metadata                     str -> str stored in every checkpoint's manifest
    io_backend, direct_io        "auto" | "uring" | "posix", "auto" | "on" | "off"
    dedup                        chunks unchanged since the newest committed checkpoint are
                                 referenced, not rewritten (default True; False: full copies)
    overlap_copy                 copy the parameters of tracked optimizers and their state into
                                 staging on a native thread during the next step, fenced at the
                                 start of optimizer.step() (see _fence); False: all of the copy
                                 happens in step_end (for code that changes parameters elsewhere)
    reserve_staging              allocate staging in the background after the first step (when the
                                 optimizer state exists), so no checkpoint pays for it
    hints_path, job, gpus        rank 0 publishes preempt.hints/1 there (default env
                                 PREEMPT_HINTS_FILE; unset: no hints); job default PREEMPT_JOB or
                                 the directory's name
    """

    def __init__(self, dir, *, every_steps=0, every_seconds=0.0, keep_last=3, check_every=1,
                 grace_s=None, reserve_s=None, stop_signals=None, checkpoint_signals=None,
                 install_signal_handlers=True, process_group=None, staging_buffers=2, track_rng=True,
                 metadata=None, io_backend="auto", direct_io="auto", exit_code_preempted=EXIT_PREEMPTED,
                 exit_code_failed=EXIT_STOP_FAILED, hints_path=None, job=None, gpus=0, reserve_staging=True,
                 overlap_copy=True, dedup=True):
        if not dir:
            raise _C.InvalidArgumentError("Runtime: dir is required")
        for key, v in (("every_steps", every_steps), ("every_seconds", every_seconds), ("check_every", check_every - 1)):
            if v < 0:
                raise _C.InvalidArgumentError(f"Runtime: {key} must be >= {0 if key != 'check_every' else 1}")
        self.dir = os.fspath(dir)
        foreign = _looks_like_checkpoint_root(self.dir)
        if foreign is not None:
            raise _C.InvalidArgumentError(
                f"Runtime: {self.dir} is not a preempt checkpoint directory (it holds '{foreign}'); "
                "use an empty or new directory")
        self.every_steps, self.every_seconds = int(every_steps), float(every_seconds)
        self._reserve_staging = bool(reserve_staging) and (every_steps > 0 or every_seconds > 0)
        self.check_every = int(check_every)
        self._overlap = bool(overlap_copy)
        self._exit_preempted, self._exit_failed = exit_code_preempted, exit_code_failed
        self._store_args = dict(keep_last=keep_last, io_backend=io_backend, direct_io=direct_io, dedup=bool(dedup))
        self._group = _Group(process_group)
        self.state = TrainingState(staging_buffers=staging_buffers, metadata=metadata, track_rng=track_rng)
        self.store = None
        self._handlers = False
        if install_signal_handlers:
            _C.install_signal_handlers(stop_signals=stop_signals, checkpoint_signals=checkpoint_signals,
                                       grace_s=-1.0 if grace_s is None else float(grace_s),
                                       reserve_s=-1.0 if reserve_s is None else float(reserve_s))
            self._handlers = True
        self._ckpt_signals_seen = _C.checkpoint_request_count()
        hints_path = hints_path if hints_path is not None else _C.hints_path_from_env()
        self._hints = None
        if hints_path and self.rank == 0:
            self._hints = HintsPublisher(os.fspath(hints_path), job or default_job(self.dir), _C.grace_s(), int(gpus))
        self._last_ckpt_at = time.monotonic()
        self._stopped = False
        self._pending = []
        # Rank 0, with hints: the scheduler's checkpoint requests (<hints>.request, preempt.request/1).
        self._requests = None
        self._request_seen = 0      # the newest request id read
        self._request_open = False  # a request no save has taken on yet
        self._answering = {}        # id(handle) -> the request its commit answers
        self.stats = {"steps": 0, "checkpoints_started": 0, "checkpoints_committed": 0, "last_commit_step": -1,
                      "stop_step": -1, "stop_committed": False, "stop_problem": "", "signal_to_commit_s": 0.0,
                      "stall_s": 0.0, "persist_s": 0.0}

    # ---- wiring -------------------------------------------------------------------------------
    @property
    def rank(self):
        return self._group.rank

    @property
    def world_size(self):
        return self._group.world_size

    def track(self, name, obj):
        """Tracks anything with state_dict()/load_state_dict() under `name` (before restore())."""
        self.state.track(name, obj)
        if self._overlap and isinstance(obj, torch.optim.Optimizer):
            self.state.fence.install(obj)

    def _ensure_store(self):
        if self.store is None:
            self.store = _C.Store(self.dir, rank=self.rank, world_size=self.world_size, **self._store_args)

    # ---- restore ------------------------------------------------------------------------------
    def restore(self):
        """Restores the newest checkpoint every rank has; returns the step to run next (0: none)."""
        self._ensure_store()
        steps = self.store.valid_steps()
        if not steps:
            listed = self.store.list()
            if listed:
                newest = listed[0]
                raise _C.MismatchError(
                    f"restore: {self.dir} has committed checkpoints but none this job can restore "
                    f"(rank {self.rank} of {self.world_size}); newest {newest['path']}: "
                    f"{newest['problem'] or 'written by ' + str(newest['world_size']) + ' ranks'}")
        newest = steps[0] if steps else -1
        neg_min, top = self._group.max([-newest, newest])[:2]
        candidate = -neg_min
        if top >= 0 and candidate < 0:
            raise _C.MismatchError(f"restore: some ranks have committed checkpoints in {self.dir} and others have none")
        result = 0
        while candidate >= 0:
            problem = None
            try:
                self.state.restore(self.store, step=candidate, fallback=False)
            except _C.Error as e:
                problem = e
            older = next((s for s in steps if s < candidate), -1)
            failed, neg_older = self._group.max([1 if problem else 0, -older])[:2]
            if not failed:
                result = candidate
                break
            if problem is not None:
                print(f"[preempt] restore of step {candidate} failed on rank {self.rank}: {problem}", file=sys.stderr)
            candidate = -neg_older
            if candidate < 0:
                if problem is not None:
                    raise problem
                raise _C.CorruptionError(f"restore: no checkpoint in {self.dir} could be restored on every rank")
            print(f"[preempt] falling back to the older checkpoint step {candidate}", file=sys.stderr)
        if result > 0:
            self.stats["last_commit_step"] = result
        self._start_requests(self._commit_time(result))
        self._last_ckpt_at = time.monotonic()
        if self._hints:
            self._hints.step = result
            self._hints.publish("training")
        return result

    # ---- per step -----------------------------------------------------------------------------
    def step_end(self, step):
        """CONTINUE, CHECKPOINT (staged, persisting) or STOP (agreed, committed or failed)."""
        if self._stopped:
            return Action.STOP
        self.stats["steps"] += 1
        if self._hints:
            self._hints.on_step(step)
        if self._pending:
            self._reap()
        if self._reserve_staging and self.stats["steps"] == 1:
            self.state.reserve_async()
        # every_steps is the same on every rank; a time-based or signalled checkpoint is agreed.
        periodic = self.every_steps > 0 and (step + 1) % self.every_steps == 0
        time_due = self.every_seconds > 0 and time.monotonic() - self._last_ckpt_at >= self.every_seconds
        time_due = self._request_wanted() or time_due  # rank-local, like a time-based checkpoint
        remaining_s = None
        if self._group.world_size == 1:
            stop = _C.stop_requested()
            requested = self._checkpoint_requested() or time_due
            if not stop and not requested and not periodic:
                return Action.CONTINUE
        else:
            if (self.stats["steps"] % self.check_every) != 0 and not periodic:
                return Action.CONTINUE
            local_s = _C.stop_remaining_s()
            local_ms = _NO_DEADLINE_MS if local_s == float("inf") else int(local_s * 1000)
            stop, requested, neg_ms = self._group.max(
                [int(_C.stop_requested()), int(self._checkpoint_requested() or time_due), -local_ms])
            if -neg_ms != _NO_DEADLINE_MS:
                remaining_s = -neg_ms / 1000.0  # the earliest deadline of all ranks
        if stop:
            return self._stop_path(step, remaining_s)
        if not requested and not periodic:
            return Action.CONTINUE
        self._ensure_store()
        # Wait for a free staging buffer rather than skip: every rank must write the same steps.
        h = self.state.checkpoint(self.store, step + 1, wait_for_staging=True, overlap=self._overlap)
        self._last_ckpt_at = time.monotonic()
        if h is None:
            return Action.CONTINUE
        self.stats["checkpoints_started"] += 1
        self.stats["stall_s"] = self.state.stats["last_stall_s"]
        self._pending.append(h)
        if self._request_open:
            self._answering[id(h)] = self._request_seen
            self._request_open = False
        return Action.CHECKPOINT

    def _commit_time(self, step):
        """When checkpoint `step` became durable (its COMMIT's mtime); 0 when unknown."""
        if step <= 0:
            return 0.0
        for c in self.store.list():
            if c["step"] == step:
                try:
                    return os.stat(os.path.join(c["path"], "COMMIT")).st_mtime
                except OSError:
                    return 0.0
        return 0.0

    def _start_requests(self, resumed_commit_unix):
        if self._hints is None or self._requests is not None:
            return
        # A request written before the commit this job resumed from was answered by that commit.
        self._requests = _C.RequestChannel(_C.request_path_for(self._hints.path),
                                           fulfilled_before_unix=resumed_commit_unix)

    def _request_wanted(self):
        """Rank 0: whether a checkpoint request needs a save of its own. A request that arrives
        while a save persists is answered by that save's commit (no second save queued behind it)."""
        if self._hints is None:
            return False
        self._start_requests(0.0)
        rid = self._requests.poll()
        if self._requests.fulfilled_id > self._hints.request_ack:
            self._hints.request_ack = self._requests.fulfilled_id
            self._hints.publish("training")
        if rid is not None:
            self._request_seen = max(self._request_seen, rid)
            in_flight = self._pending[-1] if self._pending and not self._pending[-1].done() else None
            if in_flight is not None:
                self._answering[id(in_flight)] = rid
            else:
                self._request_open = True
        return self._request_open

    def _checkpoint_requested(self):
        n = _C.checkpoint_request_count()
        if n != self._ckpt_signals_seen:
            self._ckpt_signals_seen = n
            return True
        return False

    def _reap(self):
        still = []
        acked = False
        for h in self._pending:
            if not h.done():
                still.append(h)
                continue
            err = h.error()
            answers = self._answering.pop(id(h), 0)
            if self._hints and answers > self._hints.request_ack:
                if err is None:
                    self._hints.request_ack = answers
                    acked = True
                else:  # still unanswered: the next step checkpoints for it
                    self._request_open = True
            if err is None:
                self.stats["checkpoints_committed"] += 1
                self.stats["last_commit_step"] = max(self.stats["last_commit_step"], h.step)
                st = h.stats()
                self.stats["persist_s"] = st["total_s"]
                self.stats["stall_s"] = getattr(h, "stall_s", 0.0)
                if self._hints and h.step == self.stats["last_commit_step"]:
                    self._hints.on_commit(h.step, h.path, st["bytes"], getattr(h, "stall_s", 0.0), st["total_s"])
                    self._hints.publish("stopped" if self._stopped else "training")
                    acked = False
            elif self.state.first_error is None:
                self.state.first_error = err
        self._pending = still
        if acked:
            self._hints.publish("stopped" if self._stopped else "training")

    def _stop_path(self, step, remaining_s=None):
        self._ensure_store()
        self._stopped = True
        if self._hints:
            self._hints.publish("stopping")
        self.stats["stop_step"] = step
        remaining = _C.stop_remaining_s() if remaining_s is None else remaining_s
        timeout = None if remaining == float("inf") else max(0.0, remaining)
        ok, problem = True, ""
        try:
            h = self.state.checkpoint_in_place(self.store, step + 1)
            if not h.wait(timeout):
                h.cancel()
                ok, problem = False, f"the stop checkpoint did not become durable within {timeout:.1f} s"
        except _C.Error as e:
            ok, problem = False, str(e)
        # Rank 0 returns from wait() only after COMMIT; this exchange tells every rank.
        failed = self._group.max([0 if ok else 1])[0]
        self.stats["stop_committed"] = not failed
        self.stats["stop_problem"] = problem or ("another rank could not write its part" if failed else "")
        if not failed:
            self.stats["last_commit_step"] = step + 1
            t_ns = _C.stop_receipt_realtime_ns()
            if t_ns:
                self.stats["signal_to_commit_s"] = time.time() - t_ns / 1e9
        self._reap()
        if self._hints:
            if not failed:
                self._hints.on_commit(step + 1, h.path, self.state.stats["last_bytes"],
                                      self.state.stats["last_stall_s"], h.stats()["total_s"])
                self._hints.request_ack = max(self._hints.request_ack, self._request_seen)
            self._hints.publish("stopped", lost_work_s=0.0 if not failed else None)
        return Action.STOP

    # ---- explicit saves and the end -----------------------------------------------------------
    def save_async(self, step):
        """Checkpoints now as `step` (the number of completed steps) and returns its handle. With
        overlap_copy, what tracked optimizers' step() changes is still being copied until the next
        step() (`handle.staged`); everything else is staged on return. Every rank must call it
        with the same step."""
        self._ensure_store()
        h = self.state.checkpoint(self.store, int(step), wait_for_staging=True, overlap=self._overlap)
        self.stats["checkpoints_started"] += 1
        self._pending.append(h)
        return h

    def wait(self, timeout_s=None):
        """Waits for background saves; raises the first background error."""
        for h in self.state.handles():
            h.wait_quietly(timeout_s)
        self._reap()
        err = self.state.first_error
        if err is not None:
            raise err

    @property
    def stopped(self):
        return self._stopped

    def exit_code(self):
        """0, exit_code_preempted (143) or exit_code_failed (75); waits for pending saves."""
        if self._stopped:
            return self._exit_preempted if self.stats["stop_committed"] else self._exit_failed
        try:
            self.wait()
        except _C.Error as e:
            print(f"[preempt] rank {self.rank}: a checkpoint failed: {e}", file=sys.stderr)
            return self._exit_failed
        return 0

    def close(self):
        # Tracked data loaders' workers first: left running, they can hang the interpreter's exit.
        for t in self.state.tracked:
            if isinstance(t.obj, ResumableLoader):
                t.obj.close()
        self.state.fence.remove_all()
        if self.store is not None:
            for h in self.state.handles():
                h.wait_quietly()
            self.store.close()
        if self._handlers:
            _C.uninstall_signal_handlers()
            self._handlers = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
