"""Shared helpers: make `import preempt` find the package built by CMake, launch ranks like torchrun."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def package_dir():
    """PREEMPT_PYTHON_DIR (set by ctest), else <repo>/build/python, else an installed package."""
    d = os.environ.get("PREEMPT_PYTHON_DIR")
    if d:
        return d
    d = os.path.join(ROOT, "build", "python")
    return d if os.path.isdir(os.path.join(d, "preempt")) else None


_pkg = package_dir()
if _pkg and _pkg not in sys.path:
    sys.path.insert(0, _pkg)


PREFIX = os.environ.get("PREEMPT_TEST_PREFIX", "").split()


def child_env(**extra):
    env = dict(os.environ)
    if _pkg:
        env["PYTHONPATH"] = _pkg + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("PREEMPT_LOG_LEVEL", "warn")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """`world` processes with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*)."""

    def __init__(self, script, args, world=2, log_dir=None):
        port = free_port()
        self.procs = []
        for r in range(world):
            env = child_env(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world,
                            MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            out = open(os.path.join(log_dir, f"stderr-{r}-{time.monotonic_ns()}.txt"), "w") if log_dir else None
            self.procs.append(subprocess.Popen([sys.executable, *PREFIX, script, *args], env=env,
                                               stdout=out, stderr=subprocess.STDOUT if out else None))

    def wait(self, timeout=180):
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()


@pytest.fixture
def ranks_cleanup():
    started = []
    yield started
    for r in started:
        r.kill()
