"""Exact resume of a 2-rank gloo DDP trainer (dropout, BatchNorm, AdamW, LR schedule, gradient
clipping, shuffled loader with workers) after SIGTERM to one rank and after SIGKILL.

Both interrupted runs must end with the same digest of parameters, buffers, optimizer state and
lr as an uninterrupted run, and every executed step's loss must be bitwise the reference's."""

import os
import random
import signal
import time

import pytest

from conftest import HERE, Ranks

TRAINER = os.path.join(HERE, "trainer.py")
STEPS = 40
EVERY = 5


def read_losses(out, rank):
    """{step: [loss hex, ...]} over every launch (a step re-executed after SIGKILL appears twice)."""
    losses = {}
    path = os.path.join(out, f"loss-{rank}.log")
    if not os.path.exists(path):
        return losses
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] == "step":
                losses.setdefault(int(parts[1]), []).append(parts[3])
    return losses


def read_lines(out, rank, word):
    with open(os.path.join(out, f"loss-{rank}.log")) as f:
        return [int(line.split()[1]) for line in f if line.startswith(word + " ")]


def launch(tmp, name, extra=()):
    out = os.path.join(tmp, name)
    os.makedirs(out, exist_ok=True)
    args = ["--dir", os.path.join(out, "ckpt"), "--out", out, "--steps", str(STEPS), "--every", str(EVERY), *extra]
    return out, args


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("ref"))
    out, args = launch(tmp, "ref")
    codes = Ranks(TRAINER, args, log_dir=out).wait()
    assert codes == [0, 0]
    with open(os.path.join(out, "final.txt")) as f:
        final = f.read()
    return final, [read_losses(out, r) for r in range(2)]


def wait_for_step(out, rank, step, procs, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if max(read_losses(out, rank), default=-1) >= step:
            return
        assert all(p.poll() is None for p in procs), "a rank exited early"
        time.sleep(0.005)
    raise AssertionError(f"rank {rank} did not reach step {step}")


def check_against(reference, out):
    final, ref_losses = reference
    with open(os.path.join(out, "final.txt")) as f:
        assert f.read() == final
    for r in range(2):
        got = read_losses(out, r)
        assert sorted(got) == list(range(STEPS))
        for step, values in got.items():
            assert all(v == ref_losses[r][step][0] for v in values), f"rank {r} step {step}: {values}"


@pytest.mark.parametrize("trial", [0, 1])
def test_sigterm_one_rank_stops_both_and_resumes_exactly(reference, tmp_path, trial):
    rng = random.Random(1000 + trial)
    victim = rng.randrange(2)
    at_step = rng.randrange(3, STEPS - 8)
    out, args = launch(str(tmp_path), "run", ["--sleep-ms", "30"])
    job = Ranks(TRAINER, args, log_dir=out)
    try:
        wait_for_step(out, victim, at_step, job.procs)
        job.procs[victim].send_signal(signal.SIGTERM)
        codes = job.wait()
    finally:
        job.kill()
    assert codes == [143, 143], codes
    stopped = [read_lines(out, r, "stopped") for r in range(2)]
    assert len(stopped[0]) == 1 and stopped[0] == stopped[1], stopped  # the same step on both ranks
    job = Ranks(TRAINER, args, log_dir=out)
    assert job.wait() == [0, 0]
    assert read_lines(out, 0, "start") == [0, stopped[0][0] + 1]
    check_against(reference, out)


def test_sigkill_resumes_from_last_periodic_checkpoint(reference, tmp_path):
    rng = random.Random(77)
    out, args = launch(str(tmp_path), "run", ["--sleep-ms", "30"])
    job = Ranks(TRAINER, args, log_dir=out)
    try:
        wait_for_step(out, 1, rng.randrange(EVERY + 2, STEPS - 5), job.procs)
        time.sleep(rng.random() * 0.05)  # a random instant, possibly mid-save
        job.procs[1].send_signal(signal.SIGKILL)
        time.sleep(0.2)
    finally:
        job.kill()  # the surviving rank is stuck in a collective, as under a real launcher
    job = Ranks(TRAINER, args, log_dir=out)
    assert job.wait() == [0, 0]
    starts = read_lines(out, 0, "start")
    assert starts[0] == 0 and starts[1] % EVERY == 0 and starts[1] > 0
    check_against(reference, out)
