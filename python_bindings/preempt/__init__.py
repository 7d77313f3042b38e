"""preempt — preemption-safe training for PyTorch: SIGTERM in, exact resume out.

    import preempt
    rt = preempt.Runtime("/nvme/ckpt/job-42", every_steps=500)
    rt.track("model", model); rt.track("optim", optimizer); rt.track("data", loader)
    step = rt.restore()
    for step in range(step, total):
        train_one_step()
        if rt.step_end(step) == preempt.STOP: break
    sys.exit(rt.exit_code())

Tensors go through the C++ store (staging copy, io_uring, per-chunk checksums, atomic commit);
the rest of each state dict is stored as JSON data, never pickle. See docs/python.md.
"""

from . import _C
from ._C import (AbortedError, CorruptionError, DeadlineExceededError, Error, InternalError,
                 InvalidArgumentError, IoError, MismatchError, NoSpaceError, NotFoundError,
                 UnavailableError, VersionMismatchError)
from ._api import load, save, save_async, verify
from ._data import ResumableLoader, ResumableSampler
from ._runtime import (CHECKPOINT, CONTINUE, EXIT_PREEMPTED, EXIT_STOP_FAILED, STOP, Action,
                       Runtime)
from ._state import SaveHandle

request_stop = _C.request_stop
stop_requested = _C.stop_requested

__all__ = [
    "Runtime", "Action", "CONTINUE", "CHECKPOINT", "STOP", "EXIT_PREEMPTED", "EXIT_STOP_FAILED",
    "save", "save_async", "load", "verify", "SaveHandle", "ResumableLoader", "ResumableSampler",
    "request_stop", "stop_requested",
    "Error", "InvalidArgumentError", "NotFoundError", "CorruptionError", "VersionMismatchError",
    "MismatchError", "IoError", "NoSpaceError", "DeadlineExceededError", "AbortedError",
    "UnavailableError", "InternalError",
]
