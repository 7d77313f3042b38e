"""Preemptible PyTorch training with preempt: 2 ranks, SIGTERM, exact resume.

    /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 --redirects 1 --tee 1 \
        examples/python/train.py --dir /tmp/ckpt
    # (--redirects 1 --tee 1 only for Debian's torch 1.13 on Python 3.11, whose launcher cannot
    #  parse the default "0"; with PyTorch 2.x leave them out)
    # in another shell: kill -TERM <pid of torchrun or of one worker>  -> both ranks commit and exit 143
    # run the same command again: training continues from the committed step

Rank 0 prints "step <i> loss <value>" lines and, at the end, "final <sha256 of the weights>", which is
the same whether or not the run was interrupted.
"""

import argparse
import hashlib
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import preempt


def ignore_stop_signals(_worker_id):
    """DataLoader workers leave the stop to the trainer. A cluster scheduler (SLURM's preemption)
    signals every process of the job; a worker killed by SIGTERM would make the next batch raise
    in the trainer before it could commit."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="checkpoint directory (shared by the ranks)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=20, help="periodic checkpoint every N steps")
    ap.add_argument("--sleep-ms", type=float, default=20, help="pretend each step takes longer")
    args = ap.parse_args()

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(0)
    x = torch.randn(2048, 32)
    data = torch.utils.data.TensorDataset(x, (x[:, :4].sum(1) > 0).long())
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                              torch.nn.Dropout(0.1), torch.nn.Linear(64, 2))
    model = torch.nn.parallel.DistributedDataParallel(net) if dist.is_initialized() else net
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, T_max=args.steps)
    loader = preempt.ResumableLoader(data, batch_size=32, shuffle=True, seed=1, num_workers=2,
                                     worker_init_fn=ignore_stop_signals)
    torch.manual_seed(1000 + rank)

    rt = preempt.Runtime(args.dir, every_steps=args.every)
    rt.track("model", model)
    rt.track("optim", optim)
    rt.track("sched", sched)
    rt.track("data", loader)
    step = rt.restore()                      # 0 when there is nothing to resume
    if rank == 0:
        print(f"start at step {step}", flush=True)
    batches = loader.forever()
    for step in range(step, args.steps):
        inputs, labels = next(batches)
        optim.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        sched.step()
        time.sleep(args.sleep_ms / 1000)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
        if rt.step_end(step) == preempt.STOP:
            if rank == 0:
                print(f"preempted after step {step}; checkpoint committed: {rt.stats['stop_committed']}", flush=True)
            break
    code = rt.exit_code()
    if code == 0 and rank == 0:
        h = hashlib.sha256()
        for v in net.state_dict().values():
            h.update(v.numpy().tobytes())
        print(f"final {h.hexdigest()}", flush=True)
    rt.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(code)


if __name__ == "__main__":
    main()
