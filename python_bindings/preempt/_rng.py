"""The random generators a resumed run must continue exactly: torch CPU, every CUDA device, Python
`random`, NumPy's legacy global generator (when NumPy is installed). Per process, so per rank.

The torch generators become byte entries ``rng:cpu`` and ``rng:cuda.<d>`` (the names and encoding
the C++ torch layer uses); Python's and NumPy's states are plain numbers and go into the JSON part.
"""

import random

import torch

try:
    import numpy as _np
except ImportError:  # pragma: no cover
    _np = None


class RngState:
    """A `state_dict()`/`load_state_dict()` object for the process's global generators."""

    def state_dict(self):
        sd = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available():
            for d in range(torch.cuda.device_count()):
                sd[f"cuda.{d}"] = torch.cuda.get_rng_state(d)
        version, internal, gauss = random.getstate()
        sd["python"] = [version, list(internal), gauss]
        if _np is not None:
            kind, keys, pos, has_gauss, cached = _np.random.get_state()
            sd["numpy"] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
        return sd

    def load_state_dict(self, sd):
        torch.set_rng_state(_as_bytes(sd["cpu"]))
        if torch.cuda.is_available():
            for d in range(torch.cuda.device_count()):
                key = f"cuda.{d}"
                if key in sd:
                    torch.cuda.set_rng_state(_as_bytes(sd[key]), d)
        if "python" in sd:  # absent in checkpoints written by the C++ trainer
            version, internal, gauss = sd["python"]
            random.setstate((version, tuple(internal), gauss))
        if "numpy" in sd and _np is not None:
            kind, keys, pos, has_gauss, cached = sd["numpy"]
            _np.random.set_state((kind, _np.array(keys, dtype=_np.uint32), pos, has_gauss, cached))


def _as_bytes(t):
    return t.reshape(-1).to(torch.uint8).clone()
