"""Functional API: a state dict to a directory and back, through the C++ store.

    preempt.save({"model": model.state_dict(), "optim": optim, "epoch": 3}, "/nvme/ckpt/run")
    sd = {"model": model.state_dict(), "optim": optim, "epoch": 0}
    preempt.load(sd, "/nvme/ckpt/run")       # tensors filled in place; objects get load_state_dict()

Top-level keys name the entries exactly as `Runtime.track` names do ("model:fc1.weight"), so a
checkpoint saved here can be restored by a Runtime tracking the same names and vice versa.
A top-level value with state_dict()/load_state_dict() (a Module, an Optimizer, ...) is saved through
them. Under torch.distributed each rank saves and loads its own part (call on every rank).
"""

import os

import torch
import torch.distributed as dist

from . import _C
from ._state import TrainingState


class _Value:
    """A plain value of the top-level dict, restored in place (tensors keep their identity)."""

    def __init__(self, container, key):
        self.container, self.key = container, key

    def state_dict(self):
        return self.container[self.key]

    def load_state_dict(self, new):
        self.container[self.key] = _assign(self.container[self.key], new)


def _assign(old, new):
    if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor):
        if old is not new:
            if old.shape != new.shape or old.dtype != new.dtype:
                raise _C.MismatchError(f"load: tensor is {old.dtype}{list(old.shape)} here, "
                                       f"{new.dtype}{list(new.shape)} in the checkpoint")
            with torch.no_grad():
                old.copy_(new)
        return old
    if isinstance(old, dict) and isinstance(new, dict):
        for k, v in new.items():
            old[k] = _assign(old[k], v) if k in old else v
        return old
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        old[:] = [_assign(o, n) for o, n in zip(old, new)]
        return old
    return new


def _rank_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _state_for(state_dict, metadata=None):
    if not isinstance(state_dict, dict):
        raise _C.InvalidArgumentError(f"expected a dict of named states, got a {type(state_dict).__name__}")
    st = TrainingState(staging_buffers=1, metadata=metadata, track_rng=False)
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise _C.InvalidArgumentError(f"top-level key {key!r} must be a string")
        stateful = not isinstance(value, torch.Tensor) and callable(getattr(value, "state_dict", None)) \
            and callable(getattr(value, "load_state_dict", None))
        st.track(key, value if stateful else _Value(state_dict, key))
    return st


def save_async(state_dict, dir, *, step=0, metadata=None, keep_last=3, io_backend="auto", direct_io="auto",
               dedup=True):
    """Copies the state into staging and returns a SaveHandle (`wait()` for the commit). The
    directory stays locked for writing (one writer per rank) until the handle is released.
    dedup: chunks equal to the newest committed checkpoint's are referenced, not rewritten
    (False: every byte is written; `handle.stats()` says how many were)."""
    rank, world = _rank_world()
    store = _C.Store(os.fspath(dir), rank=rank, world_size=world, keep_last=keep_last,
                     io_backend=io_backend, direct_io=direct_io, dedup=bool(dedup))
    st = _state_for(state_dict, metadata)
    h = st.checkpoint(store, int(step), wait_for_staging=True)
    h._owner = (store, st)  # the store and the staging live as long as the handle
    return h


def save(state_dict, dir, *, step=0, metadata=None, keep_last=3, timeout_s=None, **kwargs):
    """Saves and waits until the checkpoint is committed; returns its path."""
    h = save_async(state_dict, dir, step=step, metadata=metadata, keep_last=keep_last, **kwargs)
    try:
        if not h.wait(timeout_s):
            h.cancel()
            raise _C.DeadlineExceededError(f"save to {dir}: not committed within {timeout_s} s")
        return h.path
    finally:
        h._owner[0].close()  # releases the root's writer lock now, not when the handle is collected


def load(state_dict, dir, *, step=None, strict=True, fallback=True):
    """Fills `state_dict` from the newest valid checkpoint in `dir` (or `step`); returns its step.
    Tensors are written in place; stateful values get load_state_dict(); other values replaced."""
    path = os.fspath(dir)
    if not os.path.isdir(path):
        raise _C.NotFoundError(f"load: {path} is not a directory")
    rank, world = _rank_world()
    store = _C.Store(path, rank=rank, world_size=world)
    try:
        if step is None and not store.valid_steps():
            listed = store.list()
            if listed:
                raise _C.MismatchError(f"load: no checkpoint in {path} can be restored by rank {rank} of {world}; "
                                       f"newest {listed[0]['path']}: {listed[0]['problem']}")
            raise _C.NotFoundError(f"load: {path} holds no committed preempt checkpoint")
        st = _state_for(state_dict)
        r = st.restore(store, step=step, strict=strict, fallback=fallback)
        return r["step"]
    finally:
        store.close()


def verify(checkpoint_dir):
    """Reads every chunk of every rank of one checkpoint directory and checks its checksum."""
    return _C.Store.verify(os.fspath(checkpoint_dir))
