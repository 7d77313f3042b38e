"""A C++ trainer (preempt::torch) resumes a Python checkpoint of the same model and the other way
round: parameters, buffers (BatchNorm statistics and its int64 counter), the CPU generator, the
optimizer (AdamW, SGD with momentum) and the LR scheduler. A training split between the two
languages ends bitwise equal to an uninterrupted Python run."""

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


# ---- training split across languages (the twin of `xlang_main train`) --------------------------
TOTAL, SPLIT = 8, 3


def init_params(model):
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_((((torch.arange(p.numel()) * 37 + i * 11) % 23 - 11).float().div(64)).reshape(p.shape))


def batch(s):
    i = torch.arange(64)
    x = ((i * 7 + s * 13) % 17 - 8).float().div(8).reshape(16, 4)
    y = ((i[:32] * 5 + s * 3) % 11 - 5).float().div(4).reshape(16, 2)
    return x, y


def trainer(kind):
    model = make_model()
    init_params(model)
    if kind == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)


def train(objs, start, stop):
    model, opt, sched = objs
    model.train()
    for s in range(start, stop):
        x, y = batch(s)
        opt.zero_grad(set_to_none=False)  # LibTorch 1.13 zeroes gradients too
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()


def runtime(path, objs):
    rt = preempt.Runtime(path, install_signal_handlers=False)
    for name, obj in zip(("model", "optim", "sched"), objs):
        rt.track(name, obj)
    return rt


def xlang_train(path, start, stop, kind):
    r = subprocess.run([XLANG, "train", str(path), str(start), str(stop), kind], capture_output=True, text=True,
                       timeout=120, env=conftest.child_env())
    assert r.returncode == 0, r.stderr


def assert_same(objs, ref, what):
    (model, opt, sched), (rmodel, ropt, rsched) = objs, ref
    for (name, a), (_, b) in zip(model.state_dict().items(), rmodel.state_dict().items()):
        assert torch.equal(a, b), f"{what}: model {name} differs"
    sa, sb = opt.state_dict(), ropt.state_dict()
    assert sa["param_groups"] == sb["param_groups"], what
    assert sa["state"].keys() == sb["state"].keys(), what
    for i, st in sb["state"].items():
        assert st.keys() == sa["state"][i].keys(), f"{what}: state {i}"
        for k, v in st.items():
            got = sa["state"][i][k]
            if isinstance(v, torch.Tensor):
                assert got.dtype == v.dtype and torch.equal(got, v), f"{what}: optimizer state {i}.{k} differs"
            else:
                assert got == v, f"{what}: optimizer state {i}.{k}"
    assert sched.state_dict() == rsched.state_dict(), what


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_training_moves_between_languages(tmp_path, kind):
    ref = trainer(kind)
    train(ref, 0, TOTAL)

    # Python trains the first steps, C++ resumes and finishes, Python reads the result.
    objs = trainer(kind)
    with runtime(tmp_path / "py-cpp", objs) as rt:
        assert rt.restore() == 0
        train(objs, 0, SPLIT)
        assert rt.save_async(step=SPLIT).wait(60)
    xlang_train(tmp_path / "py-cpp", SPLIT, TOTAL, kind)
    objs = trainer(kind)
    with runtime(tmp_path / "py-cpp", objs) as rt:
        assert rt.restore() == TOTAL
    assert_same(objs, ref, "Python then C++")

    # C++ trains the first steps, Python resumes and finishes.
    xlang_train(tmp_path / "cpp-py", 0, SPLIT, kind)
    objs = trainer(kind)
    with runtime(tmp_path / "cpp-py", objs) as rt:
        assert rt.restore() == SPLIT
        assert objs[2].last_epoch == SPLIT
        train(objs, SPLIT, TOTAL)
    assert_same(objs, ref, "C++ then Python")

    # Another optimizer kind is refused by name.
    other = "sgd" if kind == "adamw" else "adamw"
    objs = trainer(other)
    with runtime(tmp_path / "cpp-py", objs) as rt:
        with pytest.raises(preempt.MismatchError, match=f"'optim' is a {other} optimizer, the checkpoint has {kind}"):
            rt.restore()
    assert not objs[1].state  # the optimizer was not touched
