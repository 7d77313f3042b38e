"""examples/python/train.py under `python -m torch.distributed.run` (2 ranks): SIGTERM to the
launcher (as Kubernetes does) mid-run, relaunch, and the final weights equal an uninterrupted run."""

import os
import re
import signal
import subprocess
import sys
import time

from conftest import ROOT, child_env, free_port

EXAMPLE = os.path.join(ROOT, "examples", "python", "train.py")


def torchrun(ckpt, steps, on_line=None):
    # --redirects 1 --tee 1: Debian's torch 1.13 on Python 3.11 cannot parse the default "0"
    # (its Std flag enum has no iterable NONE member); stdout is teed with a "[defaultN]:" prefix.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--max_restarts", "0",
           "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(ckpt + "-logs"),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--monitor_interval", "0.2",
           EXAMPLE, "--dir", ckpt, "--steps", str(steps), "--every", "10", "--sleep-ms", "30"]
    p = subprocess.Popen(cmd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    lines = []
    try:
        for line in p.stdout:
            lines.append(re.sub(r"^\[default\d+\]:", "", line.rstrip("\n")))
            if on_line:
                on_line(p, lines[-1])
        code = p.wait(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return code, lines


def final(lines):
    return [line for line in lines if line.startswith("final ")]


def test_example_preempted_by_sigterm_and_resumed(tmp_path):
    steps = 60
    code, ref = torchrun(str(tmp_path / "ref"), steps)
    assert code == 0, "\n".join(ref[-30:])
    assert len(final(ref)) == 1

    sent = []

    def term_at_step_25(p, line):
        if line.startswith("step 25 ") and not sent:
            os.kill(p.pid, signal.SIGTERM)  # the launcher forwards it to both workers
            sent.append(time.monotonic())

    ckpt = str(tmp_path / "run")
    code, first = torchrun(ckpt, steps, term_at_step_25)
    assert sent and code != 0, "\n".join(first[-30:])
    assert any(line.startswith("preempted after step") and line.endswith("True") for line in first), "\n".join(first[-30:])
    assert not final(first)
    code, second = torchrun(ckpt, steps)
    assert code == 0, "\n".join(second[-30:])
    start = next(line for line in second if line.startswith("start at step"))
    assert int(start.split()[-1]) > 25
    assert final(second) == final(ref)
