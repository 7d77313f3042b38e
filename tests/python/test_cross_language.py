"""A C++ trainer (preempt::torch) resumes a Python checkpoint of the same model and the other way
round: parameters, buffers (BatchNorm statistics and its int64 counter) and the CPU generator."""

import os
import subprocess

import pytest
import torch

import conftest  # noqa: F401
import preempt

XLANG = os.environ.get("PREEMPT_XLANG_BIN") or os.path.join(conftest.ROOT, "build", "tests", "python", "xlang_main")
pytestmark = pytest.mark.skipif(not os.path.exists(XLANG), reason="xlang_main (C++, needs LibTorch) is not built")


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))


def pattern(model):
    """The values xlang_main writes: tensor i (parameters, then buffers) = arange * 0.25 + i."""
    tensors = [p for _, p in model.named_parameters()] + [b for _, b in model.named_buffers()]
    return [(torch.arange(t.numel(), dtype=torch.float64) * 0.25 + i).reshape(t.shape).to(t.dtype)
            for i, t in enumerate(tensors)], tensors


def test_cpp_resumes_a_python_checkpoint(tmp_path):
    model = make_model()
    want, tensors = pattern(model)
    with torch.no_grad():
        for t, w in zip(tensors, want):
            t.copy_(w)
    torch.manual_seed(42)
    rt = preempt.Runtime(tmp_path, install_signal_handlers=False)
    rt.track("model", model)
    assert rt.restore() == 0
    assert rt.save_async(step=9).wait(60)
    rt.close()
    r = subprocess.run([XLANG, "load", str(tmp_path), "9"], capture_output=True, text=True, timeout=120,
                       env=conftest.child_env())
    assert r.returncode == 0, r.stderr
    assert "restored 9 tensors at step 9" in r.stdout


def test_python_resumes_a_cpp_checkpoint(tmp_path):
    r = subprocess.run([XLANG, "save", str(tmp_path), "13"], capture_output=True, text=True, timeout=120,
                       env=conftest.child_env())
    assert r.returncode == 0, r.stderr
    model = make_model()
    rt = preempt.Runtime(tmp_path, install_signal_handlers=False)
    rt.track("model", model)
    torch.manual_seed(7)
    assert rt.restore() == 13
    want, tensors = pattern(model)
    for t, w in zip(tensors, want):
        assert torch.equal(t, w)
    after = torch.rand(3)
    torch.manual_seed(42)
    assert torch.equal(after, torch.rand(3))
    rt.close()
    # The functional API reads it too (no RNG tracked there: strict=False ignores rng:cpu).
    other = make_model()
    assert preempt.load({"model": other}, tmp_path, strict=False) == 13
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), model.state_dict().values()))
