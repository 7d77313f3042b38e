#!/usr/bin/env python3
"""cuda_python_check — the Python package's CUDA paths (preempt.save/load, Runtime) on one GPU.

    PYTHONPATH=<build>/python python3 tests/gpu/cuda_python_check.py [--device cuda|cpu]

Checks, one line each (exit 0 all passed, 1 a check failed, 77 no usable GPU):
1. round trip: Linear -> BatchNorm1d -> ReLU -> Dropout -> Linear and Adam on the device (on cuda
   also fused Adam and capturable AdamW), a few steps, preempt.save, preempt.load into a fresh model
   and optimizer (no Adam state yet): every parameter, buffer and optimizer tensor bitwise, with
   its dtype and device; the next step of both is bitwise equal too;
2. overlapped: Runtime.save_async at steps k, k+1, k+2 (staging cold, then reused) of a model with
   an extra 32 MiB parameter; after the first two at once the next step's forward pass (batch-norm
   statistics change), backward and update, after the last the update alone (the optimizer's
   fence is all that keeps it from racing the copy); each checkpoint holds the state cloned
   synchronously after its step;
3. exact resume: N steps uninterrupted (no Runtime) against a Runtime run abandoned after its
   periodic checkpoint and one stopped by request_stop(), each rebuilt from scratch with other
   seeds, restored and continued to N: losses and final state bitwise equal (dropout draws from
   the device generator, so `rng:cuda.<d>` must be restored; deterministic algorithms);
4. GradScaler (torch.amp.GradScaler(device), else torch.cuda.amp.GradScaler) with a skipped
   step: its scale and growth tracker round trip through a Runtime, and the next step matches;
5. no warning was raised from inside the preempt package during 1-4 (deprecated torch APIs).
`--device cpu` runs the same code on the CPU (a check of this script where no GPU is; there the
scaler is disabled on torch < 2.3 and the optimizer's tensors really are copied during the next
step, which the CUDA path does before step_end returns). Each check has a 90 s watchdog.
"""

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS initializes
os.environ.setdefault("PREEMPT_LOG_LEVEL", "warn")

import argparse  # noqa: E402
import copy  # noqa: E402
import faulthandler  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

import torch  # noqa: E402

import preempt  # noqa: E402
from preempt import _C  # noqa: E402

SKIP = 77
CHECK_TIMEOUT_S = 90
IN, HIDDEN, OUT, BATCH = 64, 1024, 8, 64
DEVICE = torch.device("cpu")


class CheckFailed(Exception):
    """A check's expectation did not hold; the message is the detail."""


def expect(cond, detail):
    if not cond:
        raise CheckFailed(detail)


class Report:
    def __init__(self):
        self.failures = 0

    def run(self, what, body, *args):
        faulthandler.dump_traceback_later(CHECK_TIMEOUT_S, exit=True)  # a hang ends the run, with stacks
        try:
            detail = body(*args)
        except CheckFailed as e:
            self.fail(what, str(e))
        except Exception as e:  # noqa: BLE001 - every error is a failed check, named
            self.fail(what, f"{type(e).__name__}: {e}")
            for line in traceback.format_exc().rstrip().splitlines()[-8:]:
                print("     " + line)
        else:
            print(f"ok   {what}" + (f" ({detail})" if detail else ""))
        finally:
            faulthandler.cancel_dump_traceback_later()
        sys.stdout.flush()

    def fail(self, what, detail):
        self.failures += 1
        print(f"FAIL {what}: {detail}")

    def skip(self, what, why):
        print(f"skip {what}: {why}")


# ---- the model, the data, one step ------------------------------------------------------------
def make_model(seed):
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.BatchNorm1d(HIDDEN), torch.nn.ReLU(),
                              torch.nn.Dropout(0.25), torch.nn.Linear(HIDDEN, OUT))
    return net.to(DEVICE)


def adam(params):
    return torch.optim.Adam(params, lr=1e-2)


def batch(step):
    """The batch of `step`, from its own generator: the same in every run, whatever was resumed."""
    g = torch.Generator().manual_seed(10_000 + step)
    x, y = torch.randn(BATCH, IN, generator=g), torch.randn(BATCH, OUT, generator=g)
    return x.to(DEVICE), y.to(DEVICE)


def train_step(model, optim, step, sched=None, scaler=None, poison=False, penalty=None):
    """One step; `poison` makes the gradients infinite (a step the scaler skips), `penalty()` is
    added to the loss. Returns the loss."""
    model.train()
    x, y = batch(step)
    optim.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    if penalty is not None:
        loss = loss + penalty()
    if scaler is None:
        loss.backward()
        optim.step()
    else:
        scaler.scale(loss * float("inf") if poison else loss).backward()
        scaler.step(optim)
        scaler.update()
    if sched is not None:
        sched.step()
    return loss.detach()


# ---- state and its bitwise comparison ---------------------------------------------------------
def state_of(model, optim):
    """Entry-like name -> clone of everything a checkpoint of (model, optim) holds."""
    out = {"model:" + k: v.detach().clone() for k, v in model.state_dict().items()}
    sd = optim.state_dict()
    for i, st in sd["state"].items():
        for k, v in st.items():
            out[f"optim:state.{i}.{k}"] = v.detach().clone() if torch.is_tensor(v) else v
    out["optim:param_groups"] = copy.deepcopy(sd["param_groups"])
    return out


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = a.detach().cpu().contiguous().reshape(-1), b.detach().cpu().contiguous().reshape(-1)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def differences(want, got):
    """What differs between two state_of() results, one phrase each (empty: bitwise equal)."""
    out = []
    for name in sorted(set(want) | set(got)):
        if name not in got or name not in want:
            out.append(f"{name} {'missing' if name not in got else 'unexpected'}")
            continue
        a, b = want[name], got[name]
        if torch.is_tensor(a) != torch.is_tensor(b):
            out.append(f"{name} is a {type(b).__name__}, expected a {type(a).__name__}")
        elif not torch.is_tensor(a):
            if type(a) is not type(b) or a != b:
                out.append(f"{name} is {b!r}, expected {a!r}")
        elif a.device != b.device:
            out.append(f"{name} is on {b.device}, expected {a.device}")
        elif a.dtype != b.dtype or a.shape != b.shape:
            out.append(f"{name} is {b.dtype}{list(b.shape)}, expected {a.dtype}{list(a.shape)}")
        elif not same_bits(a, b):
            out.append(f"{name} differs")
    return out


def expect_same(want, got, what):
    diff = differences(want, got)
    expect(not diff, f"{what}: {len(diff)} difference(s): {'; '.join(diff[:4])}")


def expect_on_device(model):
    wrong = [k for k, v in model.state_dict().items() if v.device.type != DEVICE.type]
    expect(not wrong, f"restored '{wrong[0] if wrong else ''}' is not on {DEVICE.type}")


def fresh_dir(root, name):
    path = os.path.join(root, name)
    os.makedirs(path)
    return path


def entry_names(directory):
    store = _C.Store(directory)
    try:
        return {t["name"] for t in store.restore([], strict=False)["tensors"]}
    finally:
        store.close()


# ---- 1. round trip --------------------------------------------------------------------------------
def check_round_trip(root, make_optim):
    directory = fresh_dir(root, "round-trip")
    model = make_model(1)
    optim = make_optim(model.parameters())
    for step in range(3):
        train_step(model, optim, step)
    want = state_of(model, optim)
    preempt.save({"model": model, "optim": optim}, directory, step=3)

    model2 = make_model(2)
    optim2 = make_optim(model2.parameters())  # no state yet: the restore creates it on the device
    live = model2[0].weight
    expect(preempt.load({"model": model2, "optim": optim2}, directory) == 3, "load did not return step 3")
    expect(model2[0].weight is live, "the restored parameter is a new tensor, not the live one")
    expect_on_device(model2)
    expect_same(want, state_of(model2, optim2), "after load")

    torch.manual_seed(7)
    train_step(model, optim, 3)
    torch.manual_seed(7)
    train_step(model2, optim2, 3)  # the restored optimizer state works with this optimizer's kernels
    expect_same(state_of(model, optim), state_of(model2, optim2), "one step after load")
    steps = {str(v.device) for k, v in want.items() if k.endswith(".step") and torch.is_tensor(v)}
    return f"{sum(torch.is_tensor(v) for v in want.values())} tensors; Adam step on {','.join(sorted(steps)) or '-'}"


# ---- 2. overlapped checkpoint -----------------------------------------------------------------------
BIG_FLOATS = 8 << 20  # 32 MiB: its copy (with Adam's state, 96 MiB) outlasts the cheap step it overlaps


def check_overlapped(root):
    directory = fresh_dir(root, "overlapped")
    model = make_model(1)
    model.big = torch.nn.Parameter(torch.randn(BIG_FLOATS, generator=torch.Generator().manual_seed(3)).to(DEVICE))
    # Warm-up: a gradient for every element, so Adam's state is nonzero everywhere; then a cheap one
    # for a slice (still a dense gradient, every element still updated): the update would start
    # while the copy still runs, were it not for the fence.
    dense = lambda: model.big.square().mean()  # noqa: E731
    cheap = lambda: model.big[:16].square().sum()  # noqa: E731
    optim = adam(model.parameters())
    rt = preempt.Runtime(directory, install_signal_handlers=False, track_rng=False, keep_last=3)
    try:
        rt.track("model", model)
        rt.track("optim", optim)
        fence = "step pre-hook" if "step" not in optim.__dict__ else "wrapped step"
        expect(rt.restore() == 0, "a fresh directory restored a step")
        for step in range(3):
            train_step(model, optim, step, penalty=dense)
        wants, handles, overlapped = {}, [], []
        for step in range(3, 6):
            wants[step] = state_of(model, optim)
            handles.append(rt.save_async(step))
            overlapped.append(rt.state.stats["last_overlapped_bytes"])
            if step < 5:  # forward moves BatchNorm's buffers at once; step() waits at the fence
                train_step(model, optim, step, penalty=cheap)
            else:  # the update at once (the held gradients again): it races the copy but for the fence
                optim.step()
            expect(handles[-1].staged, f"checkpoint {step} is not staged after the next optimizer step")
        for h in handles:
            expect(h.wait(60), f"checkpoint {h.step} not committed within 60 s")
        now = state_of(model, optim)
        changed = [k for k, v in wants[3].items() if torch.is_tensor(v) and not same_bits(v, now[k])]
        expect(any("running_mean" in k for k in changed) and any(k.startswith("optim:state") for k in changed),
               "the step after the checkpoint changed neither BatchNorm's statistics nor Adam's state")
    finally:
        rt.close()
    if DEVICE.type == "cpu":
        expect(min(overlapped) > 0, f"no bytes were copied during the next step ({overlapped})")
    for step, want in wants.items():
        model2 = make_model(2)
        model2.big = torch.nn.Parameter(torch.zeros(BIG_FLOATS, device=DEVICE))
        optim2 = adam(model2.parameters())
        expect(preempt.load({"model": model2, "optim": optim2}, directory, step=step) == step, f"load of {step}")
        expect_on_device(model2)
        expect_same(want, state_of(model2, optim2), f"checkpoint {step}")
    mib = ", ".join(f"{n / (1 << 20):.1f}" for n in overlapped)
    return f"fence: {fence}; MiB copied during the next step: {mib}"


# ---- 3. exact resume ---------------------------------------------------------------------------------
STEPS, EVERY, MODEL_SEED, RNG_SEED = 12, 4, 1, 5


def make_trainer(model_seed):
    model = make_model(model_seed)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: 0.95 ** s)
    return model, optim, sched


def reference_run(rng_seed):
    """STEPS steps without a Runtime: (losses by step, final state)."""
    model, optim, sched = make_trainer(MODEL_SEED)
    torch.manual_seed(rng_seed)
    losses = {s: train_step(model, optim, s, sched).item().hex() for s in range(STEPS)}
    return losses, state_of(model, optim)


def runtime_run(directory, model_seed, rng_seed, last_step, stop_after=None):
    """A Runtime loop up to `last_step` (exclusive): (start step, losses, final state, exit code)."""
    model, optim, sched = make_trainer(model_seed)
    torch.manual_seed(rng_seed)  # a resumed run must get its generators from the checkpoint
    rt = preempt.Runtime(directory, every_steps=EVERY, install_signal_handlers=False)
    try:
        rt.track("model", model)
        rt.track("optim", optim)
        rt.track("sched", sched)
        start = rt.restore()
        losses = {}
        for step in range(start, last_step):
            losses[step] = train_step(model, optim, step, sched).item().hex()
            if step == stop_after:
                preempt.request_stop()  # as a SIGTERM during this step would
            if rt.step_end(step) == preempt.STOP:
                break
        code = rt.exit_code()
    finally:
        rt.close()
        _C.clear_signal_state()
    return start, losses, state_of(model, optim), code


def check_exact_resume(root, reference, interruption):
    want_losses, want_state = reference
    directory = fresh_dir(root, "resume-" + interruption)
    if interruption == "periodic":  # killed after step 9: steps 8 and 9 are lost, resumed at 8
        _, _, _, code = runtime_run(directory, MODEL_SEED, RNG_SEED, last_step=10)
        expect(code == 0, f"the first run exited {code}")
        resume_at = 8
    else:  # stopped after step 5: resumed at 6
        _, _, _, code = runtime_run(directory, MODEL_SEED, RNG_SEED, last_step=STEPS, stop_after=5)
        expect(code == preempt.EXIT_PREEMPTED, f"the stopped run exited {code}, not {preempt.EXIT_PREEMPTED}")
        resume_at = 6
    names = entry_names(directory)
    rng = {"rng:cpu"} | {f"rng:cuda.{d}" for d in range(torch.cuda.device_count() if DEVICE.type == "cuda" else 0)}
    expect(rng <= names, f"the checkpoint lacks {sorted(rng - names)}")
    start, losses, state, code = runtime_run(directory, MODEL_SEED + 1, RNG_SEED + 1, last_step=STEPS)
    expect(code == 0, f"the resumed run exited {code}")
    expect(start == resume_at, f"resumed at step {start}, expected {resume_at}")
    bad = [s for s in losses if losses[s] != want_losses[s]]
    expect(not bad, f"loss of step {bad[0] if bad else 0} is {losses.get(bad[0]) if bad else ''}, "
                    f"the uninterrupted run's {want_losses.get(bad[0]) if bad else ''}")
    expect_same(want_state, state, f"after resuming at {start}")
    return f"resumed at step {start} of {STEPS}; {', '.join(sorted(rng))} in the checkpoint"


def check_dropout_draws_from_device_generator(reference):
    """A control: another dropout seed changes the result, so check 3 depends on the RNG restore."""
    _, other = reference_run(RNG_SEED + 1)
    expect(differences(reference[1], other), "a different dropout seed gave the same final state")


# ---- 4. GradScaler ------------------------------------------------------------------------------
def make_scaler(**kwargs):
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):  # torch >= 2.3; torch.cuda.amp's is deprecated
        return amp.GradScaler(DEVICE.type, **kwargs)
    return torch.cuda.amp.GradScaler(enabled=DEVICE.type == "cuda", **kwargs)


def check_grad_scaler(root):
    directory = fresh_dir(root, "scaler")
    model = make_model(1)
    optim = adam(model.parameters())
    scaler = make_scaler(init_scale=2.0 ** 10, growth_interval=2)
    enabled = scaler.is_enabled()
    rt = preempt.Runtime(directory, install_signal_handlers=False)
    try:
        for name, obj in (("model", model), ("optim", optim), ("scaler", scaler)):
            rt.track(name, obj)
        rt.restore()
        for step in range(4):  # grows after 2 steps, backs off at the skipped step 2
            train_step(model, optim, step, scaler=scaler, poison=enabled and step == 2)
        want, want_scaler = state_of(model, optim), scaler.state_dict()
        rt.save_async(4)
        rt.wait()
    finally:
        rt.close()
    if enabled:
        expect(want_scaler["scale"] == 2.0 ** 10 and want_scaler["_growth_tracker"] == 1,
               f"unexpected scaler state before saving: {want_scaler}")

    model2 = make_model(2)
    optim2 = adam(model2.parameters())
    scaler2 = make_scaler(growth_interval=2)
    rt2 = preempt.Runtime(directory, install_signal_handlers=False)
    try:
        for name, obj in (("model", model2), ("optim", optim2), ("scaler", scaler2)):
            rt2.track(name, obj)
        expect(rt2.restore() == 4, "did not restore step 4")
    finally:
        rt2.close()
    expect(scaler2.state_dict() == want_scaler, f"scaler state {scaler2.state_dict()}, expected {want_scaler}")
    expect_same(want, state_of(model2, optim2), "after restore")
    torch.manual_seed(9)
    train_step(model, optim, 4, scaler=scaler)
    torch.manual_seed(9)
    train_step(model2, optim2, 4, scaler=scaler2)
    expect(scaler2.state_dict() == scaler.state_dict(), "the scalers differ one step after restore")
    expect_same(state_of(model, optim), state_of(model2, optim2), "one step after restore")
    return f"{type(scaler).__module__}.GradScaler, " + (f"state {want_scaler}" if enabled else "disabled here")


# ---- 5. warnings -----------------------------------------------------------------------------------
def check_no_package_warnings(caught):
    package = os.path.dirname(os.path.abspath(preempt.__file__))
    ours = [w for w in caught if os.path.abspath(w.filename).startswith(package + os.sep)]
    expect(not ours, "; ".join(f"{w.category.__name__} at {os.path.basename(w.filename)}:{w.lineno}: {w.message}"
                               for w in ours[:3]))
    return f"{len(caught)} warning(s) from elsewhere" if caught else None


def print_other_warnings(caught):
    seen = set()
    for w in caught:
        key = (w.category.__name__, str(w.message).splitlines()[0][:160])
        if key not in seen and len(seen) < 8:
            seen.add(key)
            print(f"     warning {key[0]} ({os.path.basename(w.filename)}:{w.lineno}): {key[1]}")


# ---- main --------------------------------------------------------------------------------------------
def optimizer_variants():
    variants = [("Adam", adam)]
    if DEVICE.type == "cuda":
        variants.append(("Adam fused", lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True)))
        variants.append(("AdamW capturable", lambda ps: torch.optim.AdamW(ps, lr=1e-2, capturable=True)))
    return variants


def run_checks(report, root):
    for name, make_optim in optimizer_variants():
        report.run(f"round trip on {DEVICE.type}: model, buffers and {name} state bitwise",
                   check_round_trip, fresh_dir(root, name.replace(" ", "-")), make_optim)
    if DEVICE.type != "cuda":
        report.skip("round trip with fused Adam and capturable AdamW", "cuda only")
    report.run("overlapped checkpoints hold the state after their step", check_overlapped, root)
    reference = []
    report.run(f"uninterrupted reference run of {STEPS} steps", lambda: reference.append(reference_run(RNG_SEED)))
    if reference:
        report.run("exact resume from a periodic checkpoint", check_exact_resume, root, reference[0], "periodic")
        report.run("exact resume from a stop checkpoint", check_exact_resume, root, reference[0], "stop")
        report.run("control: another dropout seed changes the result", check_dropout_draws_from_device_generator,
                   reference[0])
    report.run("GradScaler state round trips", check_grad_scaler, root)


def main():
    global DEVICE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = ap.parse_args()
    cuda_built = torch.version.cuda or "none"
    print(f"torch {torch.__version__}, CUDA {cuda_built}, Python {sys.version.split()[0]}, preempt from "
          f"{os.path.dirname(os.path.abspath(preempt.__file__))}")
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"skip: no CUDA device visible to torch {torch.__version__} (built with CUDA {cuda_built})")
        return SKIP
    DEVICE = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    name = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else "cpu"
    print(f"device {DEVICE}: {name}")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False

    report = Report()
    root = tempfile.mkdtemp(prefix="preempt-cuda-python-check-")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_checks(report, root)
        report.run("no warnings from the preempt package (deprecated torch APIs)", check_no_package_warnings,
                   list(caught))
        print_other_warnings(caught)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'FAILED' if report.failures else 'passed'}: {report.failures} check(s) failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
