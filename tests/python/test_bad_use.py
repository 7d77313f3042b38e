"""Bad use gives a clear exception naming the file, tensor or field, and nothing on disk changes."""

import hashlib
import os

import pytest
import torch

import conftest  # noqa: F401
import preempt
from preempt import _C


def tree_digest(root):
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            h.update(os.path.relpath(p, root).encode())
            with open(p, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def model(hidden=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 2))


def saved(tmp_path, steps=(5,)):
    m = model()
    for s in steps:
        preempt.save({"model": m}, tmp_path, step=s)
    return m


def test_different_architecture_names_the_tensor(tmp_path):
    saved(tmp_path)
    before = tree_digest(tmp_path)
    with pytest.raises(preempt.MismatchError, match=r"model:0\.weight.*float32\[8,4\].*float32\[9,4\]"):
        preempt.load({"model": model(hidden=9)}, tmp_path)
    deeper = torch.nn.Sequential(*model(), torch.nn.Linear(2, 2))
    with pytest.raises(preempt.MismatchError, match=r"lacks .model:3\.(weight|bias)"):
        preempt.load({"model": deeper}, tmp_path)
    rt = preempt.Runtime(tmp_path)
    rt.track("model", model(hidden=9))
    with pytest.raises(preempt.MismatchError, match="model:0.weight"):
        rt.restore()
    rt.close()
    assert tree_digest(tmp_path) == before



def test_different_optimizer_setup_names_the_field(tmp_path):
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.ones(2, 4)).sum().backward()
    opt.step()
    preempt.save({"model": m, "optim": opt}, tmp_path, step=1)
    before = tree_digest(tmp_path)
    m2 = model()
    two_groups = torch.optim.AdamW([{"params": [m2[0].weight]}, {"params": list(m2.parameters())[1:]}])
    with pytest.raises(preempt.MismatchError, match="'optim' has 2 param groups, entry 'optim:meta' has 1"):
        preempt.load({"model": m2, "optim": two_groups}, tmp_path)
    fewer = torch.optim.AdamW(list(m2.parameters())[:3])
    with pytest.raises(preempt.MismatchError, match="'optim' param group 0 has 3 params, entry 'optim:meta' has 4"):
        preempt.load({"model": m2, "optim": fewer}, tmp_path)
    with pytest.raises(preempt.MismatchError, match="'optim' is a sgd optimizer, the checkpoint has adamw"):
        preempt.load({"model": m2, "optim": torch.optim.SGD(m2.parameters(), lr=1.0)}, tmp_path)
    assert not fewer.state and not two_groups.state
    assert tree_digest(tmp_path) == before


def test_not_a_checkpoint_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("my thesis")
    before = tree_digest(tmp_path)
    with pytest.raises(preempt.InvalidArgumentError, match=r"not a preempt checkpoint directory.*notes\.txt"):
        preempt.Runtime(tmp_path)
    with pytest.raises(preempt.NotFoundError, match="holds no committed preempt checkpoint"):
        preempt.load({"model": model()}, tmp_path)
    with pytest.raises(preempt.NotFoundError, match="is not a directory"):
        preempt.load({"model": model()}, tmp_path / "missing")
    assert tree_digest(tmp_path) == before


def flip_byte(path, offset=100):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_corrupted_checkpoint_is_detected_and_the_older_one_used(tmp_path):
    m = model()
    preempt.save({"model": m}, tmp_path, step=1)
    with torch.no_grad():
        m[0].weight.add_(1)
    preempt.save({"model": m}, tmp_path, step=2)
    flip_byte(tmp_path / "step-00000002" / "rank-00000.bin")
    before = tree_digest(tmp_path)
    target = model()
    with pytest.raises(preempt.CorruptionError, match=r"rank-00000\.bin"):
        preempt.load({"model": target}, tmp_path, step=2)
    assert preempt.load({"model": target}, tmp_path) == 1  # the newest valid one
    assert torch.equal(target[0].weight, model()[0].weight)
    assert not preempt.verify(tmp_path / "step-00000002")["ok"]
    assert tree_digest(tmp_path) == before


def test_only_corrupted_checkpoints_raise(tmp_path):
    saved(tmp_path, steps=(3,))
    flip_byte(tmp_path / "step-00000003" / "rank-00000.bin")
    with pytest.raises(preempt.CorruptionError, match="checksum"):
        preempt.load({"model": model()}, tmp_path)


def test_world_size_change_is_refused(tmp_path):
    root = str(tmp_path)
    stores = [_C.Store(root, rank=r, world_size=2, commit_timeout_s=60) for r in range(2)]
    t = torch.ones(4)
    handles = [s.save_async(7, [("model:w", "float32", [4], t.data_ptr(), 16)], {}, keepalive=t) for s in stores]
    for h in handles:
        h.wait(60)
    before = tree_digest(tmp_path)
    rt = preempt.Runtime(tmp_path)
    rt.track("model", model())
    with pytest.raises(preempt.MismatchError, match="written by 2 ranks; this job has world_size 1"):
        rt.restore()
    rt.close()
    assert tree_digest(tmp_path) == before


def test_bad_arguments_are_refused():
    with pytest.raises(preempt.InvalidArgumentError, match="keep_last"):
        _C.Store("/tmp/x", keep_last=0)
    with pytest.raises(preempt.InvalidArgumentError, match="io_backend"):
        _C.Store("/tmp/x", io_backend="fast")
    with pytest.raises(preempt.InvalidArgumentError, match="every_steps"):
        preempt.Runtime("/tmp/preempt-never-created", every_steps=-1)
    with pytest.raises(preempt.InvalidArgumentError, match="unknown signal|TERMINATE"):
        preempt.Runtime("/tmp/preempt-never-created", stop_signals="TERMINATE")
    rt = preempt.Runtime("/tmp/preempt-never-created", install_signal_handlers=False)
    with pytest.raises(preempt.InvalidArgumentError, match="no state_dict"):
        rt.track("x", object())
    rt.track("m", model())
    with pytest.raises(preempt.InvalidArgumentError, match="already tracked"):
        rt.track("m", model())


def test_runtime_falls_back_to_the_older_checkpoint(tmp_path):
    m = model()
    preempt.save({"model": m}, tmp_path, step=4)
    with torch.no_grad():
        m[0].weight.add_(1)
    preempt.save({"model": m}, tmp_path, step=8)
    flip_byte(tmp_path / "step-00000008" / "rank-00000.bin")
    target = model()
    rt = preempt.Runtime(tmp_path, track_rng=False, install_signal_handlers=False)
    rt.track("model", target)
    assert rt.restore() == 4
    assert torch.equal(target[0].weight, model()[0].weight)
    rt.close()
