"""State dicts <-> (tensor entries, JSON skeleton).

A state dict is split into its tensors, each stored by the C++ store as one named entry
``"<track>:<dotted.path>"`` (``model:fc1.weight``, ``optim:state.0.exp_avg``: the names the C++
torch layer uses), and a JSON *skeleton* holding everything else, with a placeholder where each
tensor was. The skeleton is stored in the checkpoint's manifest metadata; nothing is pickled, and
a value that JSON cannot carry (a function, an arbitrary object) is refused with its path.

Skeleton encoding (JSON):
  None, bool, int, str, finite float      themselves
  float nan / inf / -inf                  {"f": "nan"} ...
  list                                    [ ... ]
  tuple / torch.Size                      {"t": [ ... ]}
  dict (keys: str, int, float, bool, None) {"d": [[key, value], ...]}   (order kept)
  torch.Tensor                            {"T": "<entry name>"}
  numpy.ndarray                           {"N": "<entry name>"}
  torch.dtype                             {"dt": "float32"}
  numpy scalar                            the Python number
"""

import math
import re

import torch

try:  # numpy is optional
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is installed with Debian's torch
    _np = None

from . import _C

# torch dtype <-> the store's dtype names (include/preempt/buffer.h).
_DTYPE_NAMES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.complex64: "complex64", torch.complex128: "complex128",
}
_DTYPES = {v: k for k, v in _DTYPE_NAMES.items()}
_DTYPES["bytes"] = torch.uint8

_NAME_OK = re.compile(r"^[A-Za-z0-9_.:@#+=,\[\]()\-]+$")


def dtype_name(t, where):
    try:
        return _DTYPE_NAMES[t]
    except KeyError:
        raise _C.InvalidArgumentError(f"{where}: tensor dtype {t} cannot be stored") from None


def torch_dtype(name, where):
    try:
        return _DTYPES[name]
    except KeyError:
        raise _C.CorruptionError(f"{where}: unknown dtype '{name}' in the checkpoint") from None


def _path_name(track, path):
    return track + ":" + ".".join(str(p) for p in path) if path else track


class Flattener:
    """Collects the tensors of one tracked object's state dict and builds its skeleton."""

    def __init__(self, track):
        self.track = track
        self.tensors = {}  # entry name -> tensor (numpy arrays become tensors sharing memory)
        self._fallback = 0

    def _entry(self, path):
        name = _path_name(self.track, path)
        if len(name) > 512 or not _NAME_OK.match(name) or ".." in name or name in self.tensors:
            # Keys with characters the store refuses (or colliding paths) get a numbered name;
            # the skeleton records it, so restore does not depend on the naming.
            self._fallback += 1
            name = f"{self.track}:#{self._fallback}"
        return name

    def encode(self, value, path=()):
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            return {"f": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        if isinstance(value, torch.Tensor):
            name = self._entry(path)
            self.tensors[name] = value.detach()
            return {"T": name}
        if _np is not None and isinstance(value, _np.ndarray):
            name = self._entry(path)
            self.tensors[name] = torch.from_numpy(_np.ascontiguousarray(value))
            return {"N": name}
        if _np is not None and isinstance(value, _np.generic):
            return self.encode(value.item(), path)
        if isinstance(value, torch.dtype):
            return {"dt": dtype_name(value, _path_name(self.track, path))}
        if isinstance(value, dict):
            items = []
            for k, v in value.items():
                if not (k is None or isinstance(k, (str, int, float, bool))):
                    raise _C.InvalidArgumentError(
                        f"state of '{self.track}': key {k!r} at '{_path_name(self.track, path)}' "
                        f"is a {type(k).__name__}; only str, int, float, bool and None keys can be stored")
                items.append([self.encode(k, path), self.encode(v, path + (k,))])
            return {"d": items}
        if isinstance(value, (tuple, torch.Size)):
            return {"t": [self.encode(v, path + (i,)) for i, v in enumerate(value)]}
        if isinstance(value, list):
            return [self.encode(v, path + (i,)) for i, v in enumerate(value)]
        raise _C.InvalidArgumentError(
            f"state of '{self.track}': value at '{_path_name(self.track, path)}' is a "
            f"{type(value).__module__}.{type(value).__qualname__}, which cannot be stored without pickle "
            "(numbers, strings, lists, tuples, dicts, tensors and numpy arrays can)")


def decode(skeleton, tensor_for, where):
    """Rebuilds a state dict from its skeleton; `tensor_for(name, kind)` returns each tensor."""
    if skeleton is None or isinstance(skeleton, (bool, int, float, str)):
        return skeleton
    if isinstance(skeleton, list):
        return [decode(v, tensor_for, where) for v in skeleton]
    if isinstance(skeleton, dict) and len(skeleton) == 1:
        (tag, v), = skeleton.items()
        if tag == "d" and isinstance(v, list):
            out = {}
            for kv in v:
                if not (isinstance(kv, list) and len(kv) == 2):
                    break
                out[decode(kv[0], tensor_for, where)] = decode(kv[1], tensor_for, where)
            else:
                return out
        elif tag == "t" and isinstance(v, list):
            return tuple(decode(x, tensor_for, where) for x in v)
        elif tag == "T" and isinstance(v, str):
            return tensor_for(v, "T")
        elif tag == "N" and isinstance(v, str):
            return tensor_for(v, "N")
        elif tag == "f" and v in ("nan", "inf", "-inf"):
            return float(v)
        elif tag == "dt" and isinstance(v, str):
            return torch_dtype(v, where)
    raise _C.CorruptionError(f"{where}: state skeleton has an unexpected value {str(skeleton)[:80]}")


def skeleton_tensor_names(skeleton, out):
    """Entry names referenced by a skeleton, in order."""
    if isinstance(skeleton, list):
        for v in skeleton:
            skeleton_tensor_names(v, out)
    elif isinstance(skeleton, dict) and len(skeleton) == 1:
        (tag, v), = skeleton.items()
        if tag in ("T", "N") and isinstance(v, str):
            out.append(v)
        elif isinstance(v, list):
            skeleton_tensor_names(v, out)
    return out
