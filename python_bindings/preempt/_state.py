"""Tracked objects -> checkpoint entries, staging snapshots, and in-place restore.

`TrainingState` is the Python counterpart of the C++ `preempt::torch::TrainingState`: it asks every
tracked object for its `state_dict()`, copies the tensors into pre-faulted staging memory (the
tensors only a fenced optimizer step changes may be copied by a native thread during the next
step, see _fence), hands the staged bytes to the C++ store, and on restore reads each tensor
straight into the live tensor when that tensor is CPU-contiguous, then calls `load_state_dict()`
where the object needs it.

Checkpoint layout (shared with the C++ layer):
  entry "<track>:<dotted.key>"            one tensor of a state dict (model:fc1.weight, ...)
  entries "<optim>:meta", "<optim>:state.<i>.<key>", "<sched>:state"
                                          optimizers and LR schedulers the C++ layer knows (_kinds)
  entry "rng:cpu", "rng:cuda.<d>"         torch generator states, dtype bytes
  metadata "preempt.py.state:<track>"     JSON skeleton of that state dict (see _flatten)
  metadata "preempt.py.format" = "1", "preempt.py.tracked" = "<track>,<track>,..."

Not thread-safe: one training thread drives it.
"""

import json
import threading
import time

import torch

from . import _C
from ._flatten import Flattener, decode, dtype_name, skeleton_tensor_names, torch_dtype
from ._fence import OptimizerFence
from ._kinds import adapt
from ._rng import RngState

FORMAT_VERSION = "1"
_STATE_KEY = "preempt.py.state:"
_ALIGN = 64  # staging offsets: any dtype can view its slice
# Pieces of at least _PAGE_PIECE bytes start on a page, as in the store's layout: the store then
# writes their whole chunks straight from staging instead of copying them (write_from_items).
_PAGE, _PAGE_PIECE = 4096, 64 << 10


def _aligned(off, nbytes):
    a = _PAGE if nbytes >= _PAGE_PIECE else _ALIGN
    return (off + a - 1) // a * a


def _unwrap(obj):
    # DistributedDataParallel / DataParallel prefix every key with "module."; checkpoints keep the
    # plain module's names, so wrapped and unwrapped runs (and the C++ trainer) share them.
    wrapped = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(obj, wrapped):
        obj = obj.module
    return obj


class Tracked:
    """One named object with state_dict()/load_state_dict(). Optimizers and LR schedulers the C++
    layer knows go through an adapter (_kinds) that stores them in the C++ layout."""

    def __init__(self, name, obj, *, raw_bytes=False, optional_entries=False, stage=0):
        self.name = name
        self.obj = _unwrap(obj)
        self.is_module = isinstance(self.obj, torch.nn.Module)
        self.raw_bytes = raw_bytes              # uint8 tensors stored as dtype "bytes" (RNG)
        self.optional_entries = optional_entries
        self.adapter = None if raw_bytes else adapt(name, self.obj)
        self.target = self.adapter or self.obj  # whose state_dict()/load_state_dict() are used
        self.stage = self.adapter.stage if self.adapter else stage  # restore order
        self.byte_names = self.adapter.byte_entries() if self.adapter else frozenset()

    def flatten(self):
        f = Flattener(self.name)
        skeleton = f.encode(self.target.state_dict())
        return skeleton, f.tensors

    def is_bytes(self, entry, tensor):
        return entry in self.byte_names or (self.raw_bytes and tensor.dtype == torch.uint8 and tensor.dim() == 1)

    def load(self, value, all_in_place):
        if self.is_module and all_in_place:
            return  # every parameter and buffer was read straight into its storage
        try:
            if self.is_module:
                self.obj.load_state_dict(value, strict=True)
            else:
                self.target.load_state_dict(value)
        except _C.Error:
            raise
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as e:
            raise _C.MismatchError(f"restore: '{self.name}'.load_state_dict refused the checkpoint: {e}") from e


class Piece:
    __slots__ = ("name", "tensor", "as_bytes", "track")

    def __init__(self, name, tensor, as_bytes, track):
        self.name, self.tensor, self.as_bytes, self.track = name, tensor, as_bytes, track

    @property
    def nbytes(self):
        return self.tensor.numel() * self.tensor.element_size()

    def item(self, address):
        if self.as_bytes:
            return (self.name, "bytes", [], address, self.nbytes)
        return (self.name, dtype_name(self.tensor.dtype, self.name), list(self.tensor.shape), address, self.nbytes)


def _direct(t):
    return t.device.type == "cpu" and t.is_contiguous() and t.numel() > 0 and not t.is_sparse


class Staging:
    """Reusable host memory for one snapshot (pinned when CUDA is available)."""

    def __init__(self):
        self.memory = None   # _C.Buffer or pinned torch tensor (kept alive by the save handle)
        self.view = None     # uint8 tensor over memory
        self.address = 0
        self.capacity = 0
        self.handle = None   # the save writing from it

    def busy(self):
        return self.handle is not None and not self.handle.done()

    @staticmethod
    def allocate(nbytes):
        """Pre-faulted memory (releases the GIL while faulting pages in)."""
        if torch.cuda.is_available():
            memory = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            memory.zero_()
            return memory
        return _C.Buffer(nbytes, prefault=True)

    def adopt(self, memory, nbytes):
        self.memory = memory
        if isinstance(memory, torch.Tensor):
            self.view, self.address = memory, memory.data_ptr()
        else:
            self.view, self.address = torch.frombuffer(memory, dtype=torch.uint8), memory.address
        self.capacity = nbytes

    def ensure(self, nbytes):
        if self.capacity >= nbytes:
            return 0.0
        t0 = time.perf_counter()
        self.memory = self.view = None
        self.adopt(self.allocate(nbytes), nbytes)
        return time.perf_counter() - t0


class TrainingState:
    def __init__(self, *, staging_buffers=2, metadata=None, track_rng=True):
        if staging_buffers not in (1, 2):
            raise _C.InvalidArgumentError(f"staging_buffers must be 1 or 2, not {staging_buffers}")
        self.tracked = []
        self.staging = [Staging() for _ in range(staging_buffers)]
        self.metadata = {str(k): str(v) for k, v in (metadata or {}).items()}
        self.first_error = None
        self.stats = {"snapshots": 0, "skipped": 0, "last_stall_s": 0.0, "last_bytes": 0, "last_alloc_s": 0.0,
                      "last_overlapped_bytes": 0}
        self._in_place = []  # handles of in-place saves (they reference live tensors)
        self._reserving = None  # (thread, {staging index: memory}, nbytes)
        self.fence = OptimizerFence()
        if track_rng:
            self.tracked.append(Tracked("rng", RngState(), raw_bytes=True, optional_entries=True, stage=2))

    # ---- tracking -----------------------------------------------------------------------------
    def track(self, name, obj):
        if not isinstance(name, str) or not name or ":" in name or not _C.is_valid_entry_name(name + ":x"):
            raise _C.InvalidArgumentError(f"track: invalid name {name!r} (entry name characters, no ':')")
        if any(t.name == name for t in self.tracked):
            raise _C.InvalidArgumentError(f"track: name '{name}' is already tracked")
        target = _unwrap(obj)
        if not (callable(getattr(target, "state_dict", None)) and callable(getattr(target, "load_state_dict", None))):
            raise _C.InvalidArgumentError(
                f"track '{name}': a {type(obj).__name__} has no state_dict()/load_state_dict()")
        t = Tracked(name, obj)
        # The RNG stays last: restored after everything that may draw from it.
        pos = len(self.tracked) - 1 if self.tracked and self.tracked[-1].name == "rng" else len(self.tracked)
        self.tracked.insert(pos, t)

    def names(self):
        return [t.name for t in self.tracked]

    # ---- capture ------------------------------------------------------------------------------
    def collect(self):
        """(pieces, metadata) of the tracked state as it is now."""
        pieces, meta = [], dict(self.metadata)
        meta["preempt.py.format"] = FORMAT_VERSION
        meta["preempt.py.tracked"] = ",".join(self.names())
        for t in self.tracked:
            skeleton, tensors = t.flatten()
            meta[_STATE_KEY + t.name] = json.dumps(skeleton, separators=(",", ":"), allow_nan=False)
            for name, tensor in tensors.items():
                pieces.append(Piece(name, tensor, t.is_bytes(name, tensor), t))
        return pieces, meta

    def _free_staging(self, wait):
        for s in self.staging:
            self._keep_error(s.handle)
        for s in self.staging:
            if not s.busy():
                return s
        if not wait:
            return None
        oldest = min((s for s in self.staging), key=lambda s: s.handle.step)
        oldest.handle.wait_quietly()
        self._keep_error(oldest.handle)
        return oldest

    def _keep_error(self, handle):
        if handle is not None and self.first_error is None and handle.done():
            err = handle.error()
            if err is not None:
                self.first_error = err

    def layout_bytes(self, pieces=None):
        pieces = self.collect()[0] if pieces is None else pieces
        off = 0
        for p in pieces:
            off = _aligned(off, p.nbytes) + p.nbytes
        return max(off, 1)

    def reserve_async(self):
        """Allocates staging for the current layout on a background thread (pre-faulting a large
        buffer takes seconds on a VM); the next snapshot waits for it only if it is not done."""
        need = self.layout_bytes()
        slots = [i for i, s in enumerate(self.staging) if s.capacity < need and not s.busy()]
        if not slots or self._reserving is not None:
            return
        made = {}

        def run():
            for i in slots:
                made[i] = Staging.allocate(need)

        th = threading.Thread(target=run, name="preempt-staging", daemon=True)
        th.start()
        self._reserving = (th, made, need)

    def _adopt_reserved(self):
        if self._reserving is None:
            return
        th, made, need = self._reserving
        th.join()
        self._reserving = None
        for i, memory in made.items():
            s = self.staging[i]
            if s.capacity < need and not s.busy():
                s.adopt(memory, need)

    def _overlappable(self, pieces):
        """Indices of the pieces whose copy may overlap the next step: CPU-contiguous tensors that
        only a fenced optimizer's step() changes (its parameters and its state)."""
        if not self.fence.optimizers:
            return set()
        params = self.fence.params()
        out = set()
        for i, p in enumerate(pieces):
            if p.as_bytes or not _direct(p.tensor):
                continue
            if self.fence.fences(p.track.obj) or (p.track.is_module and p.tensor.data_ptr() in params):
                out.add(i)
        return out

    def snapshot(self, step, *, wait_for_staging, overlap=False):
        """Copies the state into staging. Returns (staging, items, metadata, copies, sources), or
        None when skipped; `copies` (source address, staging address, nbytes) are left for the
        native background copy (only with `overlap`, see _fence)."""
        self._adopt_reserved()
        s = self._free_staging(wait_for_staging)
        if s is None:
            self.stats["skipped"] += 1
            return None
        pieces, meta = self.collect()
        offsets, off = [], 0
        for p in pieces:
            off = _aligned(off, p.nbytes)
            offsets.append(off)
            off += p.nbytes
        self.stats["last_alloc_s"] = s.ensure(max(off, 1))
        later = self._overlappable(pieces) if overlap else set()
        t0 = time.perf_counter()
        items, any_cuda, copies, sources = [], False, [], []
        with torch.no_grad():
            for i, (p, o) in enumerate(zip(pieces, offsets)):
                n = p.nbytes
                if n and i in later:
                    copies.append((p.tensor.data_ptr(), s.address + o, n))
                    sources.append(p.tensor)
                elif n:
                    dst = s.view[o:o + n]
                    src = p.tensor
                    if src.device.type != "cpu":
                        any_cuda = True
                    if p.as_bytes:
                        dst.copy_(src.reshape(-1), non_blocking=src.device.type != "cpu")
                    else:
                        dst.view(src.dtype).view(src.shape).copy_(src, non_blocking=src.device.type != "cpu")
                items.append(p.item(s.address + o))
            if any_cuda:
                torch.cuda.synchronize()
        self.stats["snapshots"] += 1
        self.stats["last_stall_s"] = time.perf_counter() - t0
        self.stats["last_bytes"] = off
        self.stats["last_overlapped_bytes"] = sum(c[2] for c in copies)
        return s, items, meta, copies, sources

    def checkpoint(self, store, step, *, wait_for_staging, overlap=False):
        """Snapshot + persist in the background; the handle, or None when skipped."""
        staged = self.snapshot(step, wait_for_staging=wait_for_staging, overlap=overlap)
        if staged is None:
            return None
        s, items, meta, copies, sources = staged
        if copies:
            native = store.save_staged(step, copies, items, meta, keepalive=(s.memory, sources))
        else:
            native = store.save_async(step, items, meta, keepalive=s.memory)
        s.handle = SaveHandle(native)
        s.handle.stall_s = self.stats["last_stall_s"]
        if copies:
            self.fence.pending.append(s.handle)
        return s.handle

    def checkpoint_in_place(self, store, step):
        """The stop checkpoint: CPU-contiguous tensors are written from their own memory (no copy),
        so nothing may modify the tracked state until the returned handle is done."""
        pieces, meta = self.collect()
        if any(p.nbytes and not _direct(p.tensor) for p in pieces):
            return self.checkpoint(store, step, wait_for_staging=True)
        t0 = time.perf_counter()
        items = [p.item(p.tensor.data_ptr() if p.nbytes else 0) for p in pieces]
        keep = [p.tensor for p in pieces]
        h = SaveHandle(store.save_async(step, items, meta, keepalive=keep))
        self._in_place.append(h)
        self.stats["snapshots"] += 1
        self.stats["last_stall_s"] = time.perf_counter() - t0
        self.stats["last_bytes"] = sum(p.nbytes for p in pieces)
        return h

    def handles(self):
        return [s.handle for s in self.staging if s.handle is not None] + self._in_place

    # ---- restore ------------------------------------------------------------------------------
    def restore(self, store, step=None, strict=True, fallback=True):
        """Reads a checkpoint into the tracked objects; returns the store's result dict."""
        current = [(t, *t.flatten()) for t in self.tracked]
        targets, direct = [], set()
        for t, _, tensors in current:
            for name, tensor in tensors.items():
                if not t.is_bytes(name, tensor) and _direct(tensor):
                    targets.append((name, dtype_name(tensor.dtype, name), list(tensor.shape),
                                    tensor.data_ptr(), tensor.numel() * tensor.element_size()))
                    direct.add(name)
        r = store.restore(targets, step=step, strict=False, fallback=fallback)
        infos = {i["name"]: i for i in r["tensors"]}
        missing = set(r["missing"])
        used = set()
        plans = []
        for t, cur_skel, cur_tensors in current:
            text = r["metadata"].get(_STATE_KEY + t.name)
            if text is not None:
                try:
                    skel = json.loads(text)
                except ValueError as e:
                    raise _C.CorruptionError(f"restore: metadata '{_STATE_KEY + t.name}' in {r['path']} "
                                             f"is not JSON: {e}") from None
            elif t.adapter is not None:  # a checkpoint of the C++ trainer: its meta entry says what is there
                skel = t.adapter.skeleton_for(lambda name: _owned_bytes(r, infos, name))
            else:
                skel = cur_skel  # a checkpoint of the C++ trainer: names only
            needed = skeleton_tensor_names(skel, [])
            if t.is_module and strict:
                _check_same_keys(t.name, needed, cur_tensors, r["path"])
            absent = [n for n in needed if n not in infos]
            if absent and text is None and t.optional_entries:
                skel = _drop_entries(skel, set(absent))
                needed = [n for n in needed if n not in absent]
                absent = []
            if absent:
                raise _C.NotFoundError(f"restore: checkpoint {r['path']} has no entry '{absent[0]}'"
                                       + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""))
            used.update(needed)
            plans.append((t, skel, cur_tensors))
        extra = [n for n in infos if n not in used]
        if extra and strict:
            raise _C.MismatchError(f"restore: checkpoint {r['path']} entry '{extra[0]}' is not tracked"
                                   + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                                   + " (use strict=False to ignore it)")
        plans.sort(key=lambda plan: plan[0].stage)  # optimizers before the schedulers that check them
        for t, skel, cur_tensors in plans:
            in_place = [True]

            def tensor_for(name, kind, cur_tensors=cur_tensors, in_place=in_place):
                if name in direct and name not in missing and name in cur_tensors:
                    return cur_tensors[name]
                in_place[0] = False
                return _owned_tensor(r, infos[name], kind)

            value = decode(skel, tensor_for, f"restore '{t.name}' from {r['path']}")
            t.load(value, in_place[0])
        return r


def _check_same_keys(track, needed, cur_tensors, path):
    want, have = set(cur_tensors), set(needed)
    if want != have:
        only_ckpt = sorted(have - want)
        only_model = sorted(want - have)
        what = (f"checkpoint has '{only_ckpt[0]}' which the module lacks" if only_ckpt
                else f"checkpoint lacks '{only_model[0]}'")
        raise _C.MismatchError(f"restore: module '{track}' does not match checkpoint {path}: {what} "
                               f"({len(only_ckpt)} entries only in the checkpoint, {len(only_model)} only in the module)")


def _drop_entries(skel, names):
    """The top-level dict of `skel` without the keys whose value is one of the tensor `names`."""
    if isinstance(skel, dict) and "d" in skel:
        return {"d": [kv for kv in skel["d"]
                      if not (isinstance(kv[1], dict) and kv[1].get("T") in names)]}
    return skel


def _owned_bytes(r, infos, name):
    if name not in infos or name not in r["owned"]:
        raise _C.NotFoundError(f"restore: checkpoint {r['path']} has no entry '{name}'")
    buf = r["owned"][name]
    return bytes(memoryview(buf)) if infos[name]["nbytes"] else b""


def _owned_tensor(r, info, kind):
    buf = r["owned"][info["name"]]
    raw = torch.frombuffer(buf, dtype=torch.uint8) if info["nbytes"] else torch.empty(0, dtype=torch.uint8)
    if info["dtype"] == "bytes":
        t = raw
    else:
        t = raw.view(torch_dtype(info["dtype"], info["name"])).view(info["shape"])
    if kind == "N":
        return t.numpy()
    return t


class SaveHandle:
    """An asynchronous checkpoint: `staged` (the state was copied; training may change it) and
    `committed` (durable on every rank). `wait(timeout_s)` returns True once committed, False when
    the timeout passed first, and raises the save's first error."""

    def __init__(self, native):
        self._native = native
        self.stall_s = 0.0  # the copy into staging before step_end / save_async returned

    @property
    def staged(self):
        """True once every tensor is in staging: from then on training may change the state."""
        return self._native.staged()

    def wait_staged(self, timeout_s=None):
        return self._native.wait_staged(timeout_s)

    @property
    def step(self):
        return self._native.step

    @property
    def path(self):
        return self._native.path

    def done(self):
        return self._native.done()

    @property
    def committed(self):
        return self._native.done() and self._native.error() is None

    def wait(self, timeout_s=None):
        return self._native.wait(timeout_s)

    def wait_quietly(self, timeout_s=None):
        try:
            return self._native.wait(timeout_s)
        except _C.Error:
            return True

    def error(self):
        """None, or the exception the save failed with (not raised)."""
        err = self._native.error()
        if err is None:
            return None
        try:
            self._native.check()
        except _C.Error as e:
            return e
        return _C.Error(f"{err[0]}: {err[1]}")

    def cancel(self):
        self._native.cancel()

    def stats(self):
        return self._native.stats()

    def __repr__(self):
        state = "committed" if self.committed else ("failed" if self.done() else "persisting")
        return f"<preempt.SaveHandle step={self.step} {state}>"
