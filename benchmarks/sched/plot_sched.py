#!/usr/bin/python3
"""Render the scheduler benchmark CSV (preempt-sched simulate --csv / bench_sched --csv) as a PNG.

usage: /usr/bin/python3 benchmarks/sched/plot_sched.py IN.csv OUT.png

One row of panels per trace: lost GPU-hours, high-priority mean and p95 wait,
most-preempted job, re-preemptions within an hour of a restart and utilization, one bar per policy.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = list(csv.DictReader(open(sys.argv[1])))
    traces = []
    for r in rows:
        if r["trace"] not in traces:
            traces.append(r["trace"])
    panels = [
        ("lost_gpu_hours", "lost GPU-hours"),
        ("high_wait_mean_s", "high-priority mean wait (s)"),
        ("high_wait_p95_s", "high-priority p95 wait (s)"),
        ("preemptions_per_job_max", "most-preempted job (preemptions)"),
        ("repreemptions", "re-preemptions within 1 h of a restart"),
        ("utilization", "GPU utilization"),
    ]
    fig, axes = plt.subplots(len(traces), len(panels), figsize=(4 * len(panels), 3.2 * len(traces)), squeeze=False)
    colors = {"fcfs": "#999999", "k8s": "#d62728", "hint-norules": "#ff7f0e", "hint-ckpt": "#9467bd", "hint": "#1f77b4", "hint-nodefrag": "#17becf", "hint-defrag": "#17becf", "k8s+runtime": "#8c564b", "hint-refill": "#2ca02c"}
    for ti, trace in enumerate(traces):
        sub = [r for r in rows if r["trace"] == trace]
        names = [r["policy"] for r in sub]
        for pi, (key, title) in enumerate(panels):
            ax = axes[ti][pi]
            vals = [float(r[key]) for r in sub]
            bars = ax.bar(names, vals, color=[colors.get(n, "#444444") for n in names])
            if key.startswith("high_wait") and max(vals) > 0 and max(vals) / max(min(v for v in vals if v > 0) if any(v > 0 for v in vals) else 1, 1e-9) > 100:
                ax.set_yscale("symlog", linthresh=1)
            for b, v in zip(bars, vals):
                ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7)
            ax.set_title(f"{trace}\n{title}" if pi == 0 else title, fontsize=9)
            ax.tick_params(axis="x", labelrotation=35, labelsize=7)
            ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("preempt scheduler: policies on the same traces", fontsize=11)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
