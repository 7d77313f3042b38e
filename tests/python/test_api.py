"""The functional API, save handles, the single-rank Runtime, signals and the GIL."""

import math
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

import conftest  # noqa: F401  (puts the built package on sys.path)
import preempt
from preempt import _C


def make_model(hidden=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
                               torch.nn.Dropout(0.2), torch.nn.Linear(hidden, 2))


def train(model, optim, sched=None, steps=3):
    for _ in range(steps):
        optim.zero_grad()
        model(torch.randn(6, 4)).pow(2).mean().backward()
        optim.step()
        if sched:
            sched.step()


class Counter:
    def __init__(self):
        self.n, self.history = 0, []

    def state_dict(self):
        return {"n": self.n, "history": list(self.history), "weights": torch.arange(4.0) * self.n}

    def load_state_dict(self, sd):
        self.n, self.history = sd["n"], list(sd["history"])


def grad_scaler(**kw):
    """torch.amp.GradScaler("cuda") where it exists (torch >= 2.3 deprecates torch.cuda.amp's)."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=torch.cuda.is_available(), **kw)
    return torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available(), **kw)


def test_save_load_roundtrip_every_kind(tmp_path):
    model = make_model()
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(optim, 2, gamma=0.5)
    scaler = grad_scaler(init_scale=1024.0)
    train(model, optim, sched)
    counter = Counter()
    counter.n, counter.history = 7, [1.5, "x", None]
    extras = {"nan": float("nan"), "inf": -math.inf, "tuple": (1, 2), 3: "int key", "arr": np.arange(5, dtype=np.int16),
              "t": torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), "dt": torch.bfloat16}
    path = preempt.save({"model": model, "optim": optim, "sched": sched, "scaler": scaler, "counter": counter,
                         "extras": extras}, tmp_path, step=12)
    assert path.endswith("step-00000012")

    model2 = make_model(); optim2 = torch.optim.AdamW(model2.parameters(), lr=1.0)
    sched2 = torch.optim.lr_scheduler.StepLR(optim2, 2, gamma=0.5)
    scaler2 = grad_scaler()
    with torch.no_grad():
        for p in model2.parameters():
            p.zero_()
    counter2 = Counter()
    live_weight = model2[0].weight
    extras2 = {"t": torch.zeros(2, 2, dtype=torch.int32)}
    live_t = extras2["t"]
    sd = {"model": model2, "optim": optim2, "sched": sched2, "scaler": scaler2, "counter": counter2, "extras": extras2}
    assert preempt.load(sd, tmp_path) == 12
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k
    assert model2[0].weight is live_weight  # restored in place
    s1, s2 = optim.state_dict(), optim2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for i in s1["state"]:
        for k in s1["state"][i]:
            assert torch.equal(torch.as_tensor(s1["state"][i][k]), torch.as_tensor(s2["state"][i][k])), (i, k)
    assert sched2.state_dict() == sched.state_dict()
    assert scaler2.state_dict() == scaler.state_dict()
    assert (counter2.n, counter2.history) == (7, [1.5, "x", None])
    e = sd["extras"]
    assert math.isnan(e["nan"]) and e["inf"] == -math.inf and e["tuple"] == (1, 2) and e[3] == "int key"
    assert e["t"] is live_t and torch.equal(live_t, extras["t"])
    assert isinstance(e["arr"], np.ndarray) and e["arr"].dtype == np.int16 and list(e["arr"]) == list(range(5))
    assert e["dt"] is torch.bfloat16



@pytest.mark.parametrize("make_optim", [
    lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.8, 0.9)),
    lambda ps: torch.optim.SGD(ps, lr=0.1),                      # no momentum: a None buffer per parameter
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    lambda ps: torch.optim.Adagrad(ps, lr=0.1),
], ids=["adam-amsgrad", "adamw", "sgd", "sgd-nesterov", "rmsprop", "adagrad"])
def test_optimizer_kinds_resume_exactly_in_the_shared_layout(tmp_path, make_optim):
    model = make_model()
    optim = make_optim([{"params": list(model.parameters())[:2]}, {"params": list(model.parameters())[2:], "lr": 0.05}])
    train(model, optim, steps=3)
    preempt.save({"model": model, "optim": optim}, tmp_path, step=3)
    names = {t["name"] for t in _C.Store(str(tmp_path)).restore([], strict=False)["tensors"]}
    assert "optim:meta" in names and all(n.startswith(("model:", "optim:meta", "optim:state.")) for n in names)

    model2 = make_model()
    optim2 = make_optim([{"params": list(model2.parameters())[:2]}, {"params": list(model2.parameters())[2:], "lr": 1.0}])
    assert preempt.load({"model": model2, "optim": optim2}, tmp_path) == 3
    s1, s2 = optim.state_dict(), optim2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    assert s1["state"].keys() == s2["state"].keys()
    for i, st in s1["state"].items():
        assert st.keys() == s2["state"][i].keys()
        for k, v in st.items():
            w = s2["state"][i][k]
            assert type(v) is type(w), (i, k)
            if isinstance(v, torch.Tensor):
                assert v.dtype == w.dtype and v.shape == w.shape and torch.equal(v, w), (i, k)
            else:
                assert v == w, (i, k)
    torch.manual_seed(5)
    train(model, optim, steps=2)
    torch.manual_seed(5)
    train(model2, optim2, steps=2)
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)



def test_overlapped_copy_is_fenced_before_the_optimizer_changes_the_state(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.BatchNorm1d(512))
    optim = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    rt = preempt.Runtime(tmp_path, every_steps=2, install_signal_handlers=False, track_rng=False)
    rt.track("model", model)
    rt.track("optim", optim)
    assert rt.restore() == 0
    want = None
    for step in range(4):
        optim.zero_grad()
        model(torch.randn(8, 512)).pow(2).mean().backward()  # forward also moves BatchNorm's buffers
        optim.step()  # waits for the copy of step 2's snapshot before changing anything
        if rt.step_end(step) == preempt.CHECKPOINT and step == 1:
            want = ({k: v.clone() for k, v in model.state_dict().items()},
                    [optim.state[p]["momentum_buffer"].clone() for p in model.parameters()])
            # parameters and momentum buffers: 2 * (512 * 512 + 512 + 2 * 512) floats
            assert rt.state.stats["last_overlapped_bytes"] == 2 * 4 * (512 * 512 + 3 * 512)
    rt.close()
    assert "step" not in optim.__dict__  # the fence is gone with the runtime
    model2 = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.BatchNorm1d(512))
    optim2 = torch.optim.SGD(model2.parameters(), lr=0.5, momentum=0.9)
    assert preempt.load({"model": model2, "optim": optim2}, tmp_path, step=2) == 2
    for k, v in want[0].items():
        assert torch.equal(model2.state_dict()[k], v), k
    for p, buf in zip(model2.parameters(), want[1]):
        assert torch.equal(optim2.state[p]["momentum_buffer"], buf)


def test_fence_copies_alongside_the_background_copy_and_every_byte_arrives(tmp_path):
    # Odd sizes and offsets: pieces end mid-range, streaming stores start and end unaligned.
    sizes = [(24 << 20) + 12, 3, (9 << 20) + 4093, 1 << 20, 0, 17]
    sources = [torch.randint(0, 256, (n,), dtype=torch.uint8) for n in sizes]
    staging = _C.Buffer(sum(sizes) + 64 * len(sizes))
    view = torch.frombuffer(staging, dtype=torch.uint8)
    copies, items, off = [], [], 7
    for i, (n, src) in enumerate(zip(sizes, sources)):
        copies.append((src.data_ptr(), staging.address + off, n))
        items.append((f"t:{i}", "bytes", [], staging.address + off if n else 0, n))
        off += n + 61
    store = _C.Store(str(tmp_path))
    h = store.save_staged(1, copies, items, {}, keepalive=(staging, sources))
    assert h.wait_staged() is True  # copies pieces itself while the background thread does too
    assert h.staged() and h.wait_staged(timeout_s=0) is True
    off = 7
    for n, src in zip(sizes, sources):
        assert torch.equal(view[off:off + n], src)
        off += n + 61
    assert h.wait(timeout_s=120) is True
    back = [torch.zeros(n, dtype=torch.uint8) for n in sizes]
    r = store.restore([(f"t:{i}", "bytes", [], t.data_ptr() if n else 0, n)
                       for i, (n, t) in enumerate(zip(sizes, back))], strict=False)
    assert r["step"] == 1
    for got, want in zip(back, sources):
        assert torch.equal(got, want)
    store.close()


def test_unstorable_value_is_refused_naming_its_path(tmp_path):
    with pytest.raises(preempt.InvalidArgumentError, match=r"'cfg:opts.fn'.*without pickle"):
        preempt.save({"cfg": {"opts": {"fn": lambda: 1}}}, tmp_path)
    with pytest.raises(preempt.InvalidArgumentError, match="track: invalid name"):
        preempt.save({"a:b": 1}, tmp_path)


def test_async_handle_is_staged_then_committed_and_isolated(tmp_path):
    t = torch.ones(1 << 16)
    h = preempt.save_async({"w": {"t": t}}, tmp_path, step=3)
    assert h.staged
    t.fill_(5)  # after staging, changes do not reach the checkpoint
    assert h.wait(timeout_s=60) is True
    assert h.committed and h.done() and h.error() is None
    back = {"w": {"t": torch.zeros(1 << 16)}}
    preempt.load(back, tmp_path)
    assert torch.equal(back["w"]["t"], torch.ones(1 << 16))


def test_background_error_is_raised_from_wait(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(preempt.Error) as info:
        h = preempt.save_async({"w": {"t": torch.ones(10)}}, blocker / "ckpt")
        h.wait(timeout_s=60)
    assert "file" in str(info.value)


def test_gil_is_released_while_a_save_waits_for_other_ranks(tmp_path):
    # Rank 0 of a 2-rank store commits only after rank 1's manifest exists; rank 1 is written by
    # a Python thread, which can run only while rank 0's wait() has released the GIL.
    root = str(tmp_path)
    r0 = _C.Store(root, rank=0, world_size=2, commit_timeout_s=60)
    r1 = _C.Store(root, rank=1, world_size=2, commit_timeout_s=60)
    a, b = torch.ones(1000), torch.full((1000,), 2.0)
    h0 = r0.save_async(1, [("x:a", "float32", [1000], a.data_ptr(), 4000)], {}, keepalive=a)
    progressed = []

    def other_rank():
        progressed.append("running")
        h1 = r1.save_async(1, [("x:a", "float32", [1000], b.data_ptr(), 4000)], {}, keepalive=b)
        h1.wait(60)
        progressed.append("rank 1 durable")

    th = threading.Thread(target=other_rank)
    th.start()
    assert h0.wait(60) is True  # would time out (commit barrier) if the GIL were held
    th.join()
    assert progressed == ["running", "rank 1 durable"]
    assert os.path.isdir(os.path.join(root, "step-00000001"))



def test_rank0_commits_only_complete_manifests_of_the_other_ranks(tmp_path):
    # A rank's manifest file exists from the moment it is created, before its bytes are written;
    # rank 0 must not commit (and checksum) it in that state.
    root = str(tmp_path)
    r0 = _C.Store(root, rank=0, world_size=2, commit_timeout_s=60)
    r1 = _C.Store(root, rank=1, world_size=2, commit_timeout_s=60)
    a, b = torch.ones(1000), torch.full((1000,), 2.0)
    h0 = r0.save_async(1, [("x:a", "float32", [1000], a.data_ptr(), 4000)], {}, keepalive=a)
    tmp = os.path.join(root, "step-00000001.tmp")
    for _ in range(6000):
        if os.path.isdir(tmp):
            break
        time.sleep(0.01)
    open(os.path.join(tmp, "rank-00001.manifest"), "w").close()  # created, not yet written
    assert h0.wait(0.3) is False  # still waiting for rank 1
    h1 = r1.save_async(1, [("x:a", "float32", [1000], b.data_ptr(), 4000)], {}, keepalive=b)
    assert h1.wait(60) is True and h0.wait(60) is True
    assert preempt.verify(os.path.join(root, "step-00000001"))["ok"]


def test_stop_signal_is_recorded_while_the_main_thread_is_in_native_code(tmp_path):
    prev_calls = []
    old = signal.signal(signal.SIGTERM, lambda s, f: prev_calls.append(s))  # a user's own handler
    try:
        rt = preempt.Runtime(tmp_path / "ck", grace_s=60)
        root = str(tmp_path / "raw")
        r0 = _C.Store(root, rank=0, world_size=2, commit_timeout_s=60)
        r1 = _C.Store(root, rank=1, world_size=2, commit_timeout_s=60)
        a = torch.ones(8)
        h0 = r0.save_async(1, [("x:a", "float32", [8], a.data_ptr(), 32)], {}, keepalive=a)
        seen = []

        def sender():
            os.kill(os.getpid(), signal.SIGTERM)
            # Python handlers run only in the main thread between bytecodes; preempt's C handler
            # records the signal at once, while the main thread is still blocked in wait().
            for _ in range(2000):
                if preempt.stop_requested():
                    break
                threading.Event().wait(0.001)
            seen.append(preempt.stop_requested())
            r1.save_async(1, [("x:a", "float32", [8], a.data_ptr(), 32)], {}, keepalive=a).wait(60)

        th = threading.Thread(target=sender)
        th.start()
        h0.wait(60)
        th.join()
        assert seen == [True]
        assert prev_calls == [signal.SIGTERM]  # the earlier Python handler was chained
        assert rt.step_end(0) == preempt.STOP
        assert rt.exit_code() == preempt.EXIT_PREEMPTED
        rt.close()
    finally:
        signal.signal(signal.SIGTERM, old)


def test_runtime_periodic_stop_and_resume(tmp_path):
    model = make_model()
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rt = preempt.Runtime(tmp_path, every_steps=3)
    rt.track("model", model)
    rt.track("optim", optim)
    assert rt.restore() == 0
    actions = []
    for step in range(10):
        train(model, optim, steps=1)
        if step == 4:
            preempt.request_stop()  # as a SIGTERM during step 4 would
        actions.append(rt.step_end(step))
        if actions[-1] == preempt.STOP:
            break
    assert actions == [preempt.CONTINUE, preempt.CONTINUE, preempt.CHECKPOINT, preempt.CONTINUE, preempt.STOP]
    assert rt.step_end(5) == preempt.STOP  # stays stopped
    assert rt.exit_code() == preempt.EXIT_PREEMPTED
    expect = {k: v.clone() for k, v in model.state_dict().items()}
    rng_after = torch.rand(3)
    rt.close()

    model2 = make_model()
    optim2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
    rt2 = preempt.Runtime(tmp_path, every_steps=3)
    rt2.track("model", model2)
    rt2.track("optim", optim2)
    assert rt2.restore() == 5
    for k, v in model2.state_dict().items():
        assert torch.equal(v, expect[k]), k
    assert torch.equal(torch.rand(3), rng_after)  # the RNG continues where it stopped
    assert rt2.exit_code() == 0
    rt2.close()


def test_resumable_loader_with_workers_continues_at_the_next_batch():
    data = torch.utils.data.TensorDataset(torch.arange(50).float())
    ref = preempt.ResumableLoader(data, batch_size=4, seed=3, num_workers=2)
    it = ref.forever()
    expected = [next(it)[0].tolist() for _ in range(30)]  # crosses epoch boundaries (13 batches each)
    for cut in (5, 13, 17):
        a = preempt.ResumableLoader(data, batch_size=4, seed=3, num_workers=2)
        it = a.forever()
        for _ in range(cut):
            next(it)
        b = preempt.ResumableLoader(data, batch_size=4, seed=3, num_workers=2)
        b.load_state_dict(a.state_dict())
        it_b = b.forever()
        assert [next(it_b)[0].tolist() for _ in range(30 - cut)] == expected[cut:]
    other = preempt.ResumableLoader(data, batch_size=5, seed=3)
    with pytest.raises(preempt.MismatchError, match="batch_size"):
        other.load_state_dict(a.state_dict())


def test_closing_the_runtime_stops_the_loader_workers_and_keeps_the_position(tmp_path):
    # A DataLoader worker left running at interpreter exit can hang the exit (a 2-rank trainer
    # stopped by SIGTERM hung in its exit that way): Runtime.close() stops a tracked loader's workers.
    import multiprocessing
    data = torch.utils.data.TensorDataset(torch.arange(50).float())
    ref = preempt.ResumableLoader(data, batch_size=4, seed=3, num_workers=2)
    it = ref.forever()
    expected = [next(it)[0].tolist() for _ in range(20)]
    ref.close()
    assert multiprocessing.active_children() == []
    loader = preempt.ResumableLoader(data, batch_size=4, seed=3, num_workers=2)
    rt = preempt.Runtime(tmp_path, every_steps=100)
    rt.track("data", loader)
    assert rt.restore() == 0
    batches = loader.forever()
    got = [next(batches)[0].tolist() for _ in range(7)]
    assert len(multiprocessing.active_children()) == 2  # the epoch's two workers
    rt.close()
    assert multiprocessing.active_children() == []
    # The position is kept: the stream goes on at the next batch, with new workers.
    got += [next(batches)[0].tolist() for _ in range(13)]
    assert got == expected
    loader.close()
    assert multiprocessing.active_children() == []


def test_distributed_sampler_splits_the_epoch():
    parts = [list(preempt.ResumableSampler(10, seed=1, num_replicas=3, rank=r)) for r in range(3)]
    assert all(len(p) == 4 for p in parts)
    assert set(sum(parts, [])) == set(range(10))
    s = preempt.ResumableSampler(10, seed=1, num_replicas=3, rank=1)
    s.set_epoch(1)
    assert list(s) != parts[1]


def test_rank0_publishes_hints(tmp_path):
    import json
    hints = str(tmp_path / "hints.json")
    model = make_model()
    rt = preempt.Runtime(tmp_path / "ck", every_steps=2, hints_path=hints, job="job-7", gpus=0)
    rt.track("model", model)
    rt.restore()
    h = json.loads(_C.read_hints_json(hints))
    assert (h["schema"], h["job"], h["state"], h["last_commit"]["step"]) == ("preempt.hints/1", "job-7", "training", -1)
    for step in range(2):
        rt.step_end(step)
    rt.wait()
    rt.step_end(2)  # reaps the committed save and republishes
    h = json.loads(_C.read_hints_json(hints))
    assert h["last_commit"]["step"] == 2 and h["cost"]["persist_s"] > 0 and h["grace"]["needed_s"] > 1
    preempt.request_stop()
    assert rt.step_end(3) == preempt.STOP
    h = json.loads(_C.read_hints_json(hints))
    assert (h["state"], h["step"], h["last_commit"]["step"], h["lost_work_s"]) == ("stopped", 4, 4, 0)
    rt.close()


def test_scheduler_checkpoint_request_is_answered_and_not_redone_after_resume(tmp_path):
    import json
    hints = str(tmp_path / "hints.json")
    request = _C.request_path_for(hints)

    def published():
        return json.loads(_C.read_hints_json(hints))

    def runtime():
        model = make_model()
        rt = preempt.Runtime(tmp_path / "ck", hints_path=hints, job="job-8")  # no periodic saves
        rt.track("model", model)
        return rt

    rt = runtime()
    assert rt.restore() == 0
    assert rt.step_end(0) == preempt.CONTINUE
    _C.write_checkpoint_request(request, 1)
    time.sleep(0.02)  # past the channel's 5 ms poll interval
    assert rt.step_end(1) == preempt.CHECKPOINT
    rt.wait()
    h = published()
    assert (h["request_ack"], h["last_commit"]["step"]) == (1, 2)
    time.sleep(0.02)
    assert rt.step_end(2) == preempt.CONTINUE  # answered once
    rt.close()

    rt = runtime()  # resumed from the commit that answered request 1: not redone
    assert rt.restore() == 2
    time.sleep(0.02)
    assert rt.step_end(2) == preempt.CONTINUE
    assert published()["request_ack"] == 1
    _C.write_checkpoint_request(request, 2)
    time.sleep(0.02)
    assert rt.step_end(3) == preempt.CHECKPOINT
    rt.wait()
    assert published()["request_ack"] == 2
    with pytest.raises(_C.InvalidArgumentError, match="id must be > 0"):
        _C.write_checkpoint_request(request, 0)
    rt.close()
