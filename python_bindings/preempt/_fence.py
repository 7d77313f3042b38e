"""The fence that lets a snapshot's copy overlap the next training step.

A periodic snapshot copies the tensors only `optimizer.step()` changes (the parameters of the
tracked optimizers and their state) on a native background thread, with the GIL free, while the
next forward and backward run. The fence runs first thing in every tracked optimizer's `step()`
and waits for those copies, so each snapshot still holds the state after the step it is named
for. Everything else (buffers, which forward changes, small state, other objects) is copied
before `step_end` returns.

torch >= 2.0: `Optimizer.register_step_pre_hook`; torch 1.13: the instance's `step` is wrapped.
Not thread-safe: the training thread only.
"""

import functools
import time


class OptimizerFence:
    def __init__(self):
        self.optimizers = []  # (optimizer, remover)
        self.pending = []     # SaveHandles whose copy may still run
        self.waited_s = 0.0   # time the last fence blocked

    def install(self, optimizer):
        if any(o is optimizer for o, _ in self.optimizers):
            return
        if hasattr(optimizer, "register_step_pre_hook"):
            def pre_hook(*_):
                self.wait()  # torch 2.x: a pre-hook returns None (or new (args, kwargs)), never a value

            hook = optimizer.register_step_pre_hook(pre_hook)
            remove = hook.remove
        else:
            original = optimizer.step

            @functools.wraps(original)
            def step(*args, **kwargs):
                self.wait()
                return original(*args, **kwargs)

            optimizer.step = step

            def remove():
                if optimizer.__dict__.get("step") is step:
                    del optimizer.__dict__["step"]
        self.optimizers.append((optimizer, remove))

    def remove_all(self):
        self.wait()
        for _, remove in self.optimizers:
            remove()
        self.optimizers = []

    def params(self):
        """data_ptr() of every parameter a fenced optimizer updates."""
        return {p.data_ptr() for o, _ in self.optimizers for g in o.param_groups for p in g["params"]}

    def fences(self, obj):
        return any(o is obj for o, _ in self.optimizers)

    def wait(self):
        if not self.pending:
            return 0.0
        t0 = time.perf_counter()
        for h in self.pending:
            t = time.perf_counter()
            h.wait_staged()
            h.stall_s += time.perf_counter() - t  # training was blocked for it too
        self.pending = []
        self.waited_s = time.perf_counter() - t0
        return self.waited_s
