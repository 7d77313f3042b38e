"""Optimizers and LR schedulers in the C++ torch layer's checkpoint layout.

A tracked `torch.optim` optimizer of a kind the C++ layer knows (Adam, AdamW, SGD, RMSprop,
Adagrad) is stored as the C++ trainer stores it:
  entry "<optim>:meta"              kind, each param group's options by name, each parameter's
                                    step and which state tensors it has (cereal, encoded by _C)
  entry "<optim>:state.<i>.<key>"   state tensor `key` of parameter i (numbered across groups)
An LR scheduler (`last_epoch` counting style) is stored as
  entry "<sched>:state"             step count (= last_epoch) and the rates it left (cereal)
What only Python has (group keys like `foreach`, `initial_lr`, the form of `step`, a
scheduler's other fields) goes into the JSON part as "extra"; a checkpoint without it (written
by C++) takes those from the live object. So a C++ trainer resumes a Python checkpoint and the
other way round. Other optimizers and schedulers keep the generic state_dict layout (_flatten).

Each adapter offers state_dict()/load_state_dict() over a *wire* dict whose tensor paths are the
entry names above, plus skeleton_for(read_meta) for checkpoints that have no JSON part.
"""

import collections
import math

import torch

from . import _C


def _value(key):
    return key, (lambda g: g[key]), (lambda g, v: g.__setitem__(key, v))


def _flag(key):
    return key, (lambda g: 1.0 if g[key] else 0.0), (lambda g, v: g.__setitem__(key, v != 0))


def _beta(i):
    def put(g, v):
        betas = list(g["betas"])
        betas[i] = v
        g["betas"] = tuple(betas)
    return "betas", (lambda g: g["betas"][i]), put


# Each meta option: (name in "<optim>:meta", (Python group key, read, write)).
_ADAM = ([("lr", _value("lr")), ("beta1", _beta(0)), ("beta2", _beta(1)), ("eps", _value("eps")),
          ("weight_decay", _value("weight_decay")), ("amsgrad", _flag("amsgrad"))],
         ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), float)

# (class, kind name, options, state tensor keys, type of a plain-number step (None: no step)).
# AdamW before Adam: newer torch derives AdamW from Adam.
_OPTIMIZERS = [
    (torch.optim.AdamW, "adamw", *_ADAM),
    (torch.optim.Adam, "adam", *_ADAM),
    (torch.optim.SGD, "sgd",
     [("lr", _value("lr")), ("momentum", _value("momentum")), ("dampening", _value("dampening")),
      ("weight_decay", _value("weight_decay")), ("nesterov", _flag("nesterov"))],
     ("momentum_buffer",), None),
    (torch.optim.RMSprop, "rmsprop",
     [("lr", _value("lr")), ("alpha", _value("alpha")), ("eps", _value("eps")),
      ("weight_decay", _value("weight_decay")), ("momentum", _value("momentum")), ("centered", _flag("centered"))],
     ("square_avg", "momentum_buffer", "grad_avg"), int),
    (torch.optim.Adagrad, "adagrad",
     [("lr", _value("lr")), ("lr_decay", _value("lr_decay")), ("weight_decay", _value("weight_decay")),
      ("initial_accumulator_value", _value("initial_accumulator_value")), ("eps", _value("eps"))],
     ("sum",), float),
]


def _bytes_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _tensor_bytes(t):
    return t.reshape(-1).numpy().tobytes()


def _num(v):
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


def adapt(name, obj):
    """The adapter that stores `obj` in the C++ layout, or None for the generic layout."""
    if isinstance(obj, torch.optim.Optimizer):
        for cls, kind, options, keys, step_type in _OPTIMIZERS:
            if isinstance(obj, cls):
                return OptimizerAdapter(name, obj, kind, options, keys, step_type)
        return None
    base = getattr(torch.optim.lr_scheduler, "LRScheduler", torch.optim.lr_scheduler._LRScheduler)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
    if (isinstance(obj, (base, torch.optim.lr_scheduler._LRScheduler)) and not isinstance(obj, plateau)
            and hasattr(obj, "optimizer") and hasattr(obj, "last_epoch")):
        return SchedulerAdapter(name, obj)
    return None


class OptimizerAdapter:
    stage = 0

    def __init__(self, name, opt, kind, options, keys, step_type):
        self.name, self.obj, self.kind = name, opt, kind
        self.options, self.keys, self.step_type = options, keys, step_type
        self.meta_entry = name + ":meta"
        self.covered = {pykey for _, (pykey, _, _) in options} | {"params"}  # not repeated in "extra"

    def byte_entries(self):
        return {self.meta_entry}

    def state_dict(self):
        sd = self.obj.state_dict()
        groups, extra_groups = [], []
        for g in sd["param_groups"]:
            groups.append(([k for k, _ in self.options], [_num(get(g)) for _, (_, get, _) in self.options],
                           len(g["params"])))
            extra_groups.append({k: v for k, v in g.items() if k not in self.covered})
        order = [i for g in sd["param_groups"] for i in g["params"]]
        params, state, extra_state, step_form = [], {}, {}, None
        for n, i in enumerate(order):
            st = sd["state"].get(i)
            if not st:
                params.append((False, 0, []))
                continue
            present = [k for k in self.keys if isinstance(st.get(k), torch.Tensor)]
            step = st.get("step", 0)
            if isinstance(step, torch.Tensor) and step_form is None:
                step_form = {"dtype": str(step.dtype).replace("torch.", ""), "shape": list(step.shape),
                             "on_param_device": step.device.type != "cpu"}
            params.append((True, int(_num(step)), present))
            state[n] = {k: st[k] for k in present}
            rest = {k: v for k, v in st.items() if k != "step" and k not in present}
            if rest:
                extra_state[n] = rest
        meta = _C.encode_optimizer_meta(self.kind, groups, params)
        extra = {"groups": extra_groups, "state": extra_state, "step": step_form}
        return {"meta": _bytes_tensor(meta), "state": state, "extra": extra}

    def _read_meta(self, data):
        m = _C.decode_optimizer_meta(data, self.meta_entry)
        if m["kind"] != self.kind:
            raise _C.MismatchError(f"restore: '{self.name}' is a {self.kind} optimizer, the checkpoint has {m['kind']}")
        groups = self.obj.param_groups
        if len(m["groups"]) != len(groups):
            raise _C.MismatchError(f"restore: '{self.name}' has {len(groups)} param groups, "
                                   f"entry '{self.meta_entry}' has {len(m['groups'])}")
        for gi, ((_, _, n), g) in enumerate(zip(m["groups"], groups)):
            if n != len(g["params"]):
                raise _C.MismatchError(f"restore: '{self.name}' param group {gi} has {len(g['params'])} params, "
                                       f"entry '{self.meta_entry}' has {n}")
        total = sum(len(g["params"]) for g in groups)
        if len(m["params"]) != total:
            raise _C.CorruptionError(f"restore: entry '{self.meta_entry}' lists {len(m['params'])} parameters, "
                                     f"the param groups hold {total}")
        for i, (_, _, present) in enumerate(m["params"]):
            unknown = [k for k in present if k not in self.keys]
            if unknown:
                raise _C.CorruptionError(f"restore: entry '{self.meta_entry}' lists state '{unknown[0]}' of parameter "
                                         f"{i}, which a {self.kind} optimizer does not have")
        return m

    def skeleton_for(self, read_bytes):
        """The wire skeleton of a checkpoint without a JSON part (the C++ trainer's)."""
        m = self._read_meta(read_bytes(self.meta_entry))
        state = [[i, {"d": [[k, {"T": f"{self.name}:state.{i}.{k}"}] for k in present]}]
                 for i, (has, _, present) in enumerate(m["params"]) if has]
        return {"d": [["meta", {"T": self.meta_entry}], ["state", {"d": state}]]}

    def load_state_dict(self, wire):
        m = self._read_meta(_tensor_bytes(wire["meta"]))
        extra = wire.get("extra") or {}
        live = self.obj.state_dict()
        params = [p for g in self.obj.param_groups for p in g["params"]]
        groups = []
        for gi, (g, (keys, values, _)) in enumerate(zip(self.obj.param_groups, m["groups"])):
            ng = {k: v for k, v in g.items() if k != "params"}
            if extra.get("groups"):
                ng.update(extra["groups"][gi])
            saved = dict(zip(keys, values))
            for key, (_, _, put) in self.options:
                if key in saved:
                    put(ng, saved[key])
            ng["params"] = g["params"]
            groups.append(ng)
        step_form = extra.get("step") or _live_step_form(live)
        extra_state = {int(k): v for k, v in (extra.get("state") or {}).items()}
        state = {}
        tensors = wire.get("state") or {}
        for i, (has, step, present) in enumerate(m["params"]):
            if not has:
                continue
            p = params[i]
            st = dict(extra_state.get(i, {}))
            if self.step_type is not None:
                st["step"] = _make_step(step, step_form, self.step_type, p)
            got = tensors.get(i, {})
            for k in present:
                if k not in got:
                    raise _C.CorruptionError(f"restore: entry '{self.meta_entry}' lists "
                                             f"'{self.name}:state.{i}.{k}', which is missing")
                t = got[k]
                if p.is_floating_point() and t.dtype != p.dtype or t.device != p.device:
                    t = t.to(device=p.device, dtype=p.dtype if p.is_floating_point() else t.dtype)
                st[k] = t
            state[p] = st
        # What Optimizer.load_state_dict ends with, without its deep copy of every state tensor
        # (the tensors here are fresh: read by the store, or the live ones restored in place).
        by_param = collections.defaultdict(dict)
        by_param.update(state)
        self.obj.__setstate__({"state": by_param, "param_groups": groups})


def _live_step_form(live):
    for st in live["state"].values():
        step = st.get("step")
        if isinstance(step, torch.Tensor):
            return {"dtype": str(step.dtype).replace("torch.", ""), "shape": list(step.shape),
                    "on_param_device": step.device.type != "cpu"}
    return None


def _make_step(step, form, step_type, param):
    if form is None:
        # A plain number: the optimizer's __setstate__ turns it into the tensor its version uses.
        return step_type(step)
    dtype = getattr(torch, form["dtype"], None)
    if not isinstance(dtype, torch.dtype):
        raise _C.CorruptionError(f"restore: optimizer step dtype '{form['dtype']}' is unknown")
    device = param.device if form.get("on_param_device") else torch.device("cpu")
    return torch.full(form["shape"], float(step), dtype=dtype, device=device)


class SchedulerAdapter:
    stage = 1  # after the optimizers: the rates are checked against the restored optimizer

    def __init__(self, name, sched):
        self.name, self.obj = name, sched
        self.state_entry = name + ":state"

    def byte_entries(self):
        return {self.state_entry}

    def _rates(self):
        return [_num(g["lr"]) for g in self.obj.optimizer.param_groups]

    def state_dict(self):
        sd = self.obj.state_dict()
        blob = _C.encode_lr_scheduler_state(int(sd["last_epoch"]), self._rates())
        return {"state": _bytes_tensor(blob), "extra": {k: v for k, v in sd.items() if k != "last_epoch"}}

    def skeleton_for(self, read_bytes):
        read_bytes(self.state_entry)  # present and parses
        return {"d": [["state", {"T": self.state_entry}]]}

    def load_state_dict(self, wire):
        step_count, rates = _C.decode_lr_scheduler_state(_tensor_bytes(wire["state"]), self.state_entry)
        now = self._rates()
        if len(now) != len(rates) or any(a != b and not (math.isnan(a) and math.isnan(b)) for a, b in zip(now, rates)):
            raise _C.MismatchError(
                f"restore: LR scheduler '{self.name}': its optimizer's learning rates are {now}, the checkpoint's "
                f"are {rates} (track the scheduler's optimizer too)")
        extra = wire.get("extra")
        if extra:
            sd = dict(extra)
        else:
            sd = self.obj.state_dict()
            sd["_step_count"] = step_count + 1  # the constructor's own step() counts in Python
            sd["_last_lr"] = list(rates)
        sd["last_epoch"] = step_count
        self.obj.load_state_dict(sd)
