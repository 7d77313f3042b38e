"""Deterministic DDP trainer driven by the tests (launched like torchrun: RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment).

An MLP with dropout and BatchNorm, AdamW, a LambdaLR schedule, gradient clipping, a shuffled
ResumableLoader with worker processes. Every rank appends "step <i> loss <float.hex()>" to
<out>/loss-<rank>.log for every executed step; at the end rank 0 writes <out>/final.txt with a
digest of every parameter, buffer, optimizer tensor and the learning rate.
"""

import argparse
import faulthandler
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import preempt


class Data(torch.utils.data.Dataset):
    def __init__(self, n=384, dim=12):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x[:, :3].sum(1, keepdim=True) > 0).float()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def digest(model, optim):
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    sd = optim.state_dict()
    for i in sorted(sd["state"]):
        for k in sorted(sd["state"][i]):
            h.update(f"{i}.{k}".encode())
            h.update(torch.as_tensor(sd["state"][i][k]).cpu().contiguous().numpy().tobytes())
    h.update(repr([g["lr"] for g in sd["param_groups"]]).encode())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sleep-ms", type=float, default=0)
    ap.add_argument("--kill-at", type=int, default=-1, help="SIGKILL this process after that step (rank --kill-rank)")
    ap.add_argument("--kill-rank", type=int, default=0)
    a = ap.parse_args()
    faulthandler.dump_traceback_later(150, exit=True)  # a hang leaves its stacks in the stderr file

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if world > 1 else 0
    torch.manual_seed(1234)  # same initial weights on every rank
    torch.set_num_threads(1)

    net = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                              torch.nn.Dropout(0.3), torch.nn.Linear(32, 1))
    model = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda s: 0.97 ** s)
    loader = preempt.ResumableLoader(Data(), batch_size=16, shuffle=True, seed=5, num_workers=a.workers)
    torch.manual_seed(100 + rank)  # per-rank dropout streams

    rt = preempt.Runtime(a.dir, every_steps=a.every)
    rt.track("model", model)
    rt.track("optim", optim)
    rt.track("sched", sched)
    rt.track("data", loader)
    start = rt.restore()
    log = open(os.path.join(a.out, f"loss-{rank}.log"), "a", buffering=1)
    log.write(f"start {start}\n")
    batches = loader.forever()
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for step in range(start, a.steps):
        x, y = next(batches)
        optim.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optim.step()
        sched.step()
        log.write(f"step {step} loss {loss.item().hex()}\n")
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000)
        if step == a.kill_at and rank == a.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)
        if rt.step_end(step) == preempt.STOP:
            log.write(f"stopped {step}\n")
            break
    code = rt.exit_code()
    if code == 0 and rank == 0:
        with open(os.path.join(a.out, "final.txt"), "w") as f:
            f.write(digest(net, optim) + "\n")
    log.close()
    rt.close()
    if world > 1:
        dist.destroy_process_group()
    sys.exit(code)


if __name__ == "__main__":
    main()
