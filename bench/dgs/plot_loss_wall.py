#!/usr/bin/python3
"""Draws bench/dgs/loss_wall.sh's runs: training loss vs wall time, one line
per mode (the mean over every worker's steps in each time bin), and writes
summary.md beside it: steps, step time, samples/s, the loss reached, the time
each mode took to reach the loss every mode reaches, and the test accuracy.
A report, not a test: nothing passes or fails.

    /usr/bin/python3 bench/dgs/plot_loss_wall.py OUT [--title T] [--bins 40]
"""
import argparse
import csv
import glob
import os
import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"ddp": "synchronous dense (DDP, gloo)", "asgd": "ASGD (gradex PS, density 1)",
         "dgs": "DGS (gradex PS, density 0.01)"}


def read_steps(raw):
    """{mode: [(rank, step, wall_s, loss), ...]} from raw/<mode>.rank<R>.steps."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(raw, "*.rank*.steps"))):
        mode = re.match(r"(.+)\.rank\d+\.steps$", os.path.basename(path)).group(1)
        with open(path) as f:
            for line in f:
                r, s, w, l = line.strip().split(",")
                runs.setdefault(mode, []).append((int(r), int(s), float(w), float(l)))
    return runs


def binned(rows, width):
    """(bin centre, mean loss) over every worker's steps that ended in each bin."""
    bins = {}
    for _, _, w, l in rows:
        bins.setdefault(int(w // width), []).append(l)
    return [((b + 0.5) * width, statistics.fmean(v)) for b, v in sorted(bins.items())]


def smoothed(curve, k=3):
    """A centred running mean over k bins: one bin of batch-8 steps is noisy."""
    h = k // 2
    return [(t, statistics.fmean(l for _, l in curve[max(0, i - h):i + h + 1]))
            for i, (t, _) in enumerate(curve)]


def first_at_or_below(curve, level):
    return next((t for t, l in curve if l <= level), None)


def last_row(path):
    if not os.path.exists(path):
        return {}
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[-1] if rows else {}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--title", default="")
    p.add_argument("--bins", type=int, default=30)
    a = p.parse_args()
    raw = os.path.join(a.out, "raw")
    runs = read_steps(raw)
    if not runs:
        raise SystemExit(f"plot_loss_wall: no raw/*.rank*.steps under {a.out}")
    horizon = max(w for rows in runs.values() for _, _, w, _ in rows)
    width = horizon / a.bins
    curves = {m: smoothed(binned(rows, width)) for m, rows in runs.items()}
    # The loss every mode reaches: the highest of the modes' lowest smoothed losses.
    common = max(min(l for _, l in c) for c in curves.values())

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for m in ("ddp", "asgd", "dgs"):
        if m in curves:
            ax.plot(*zip(*curves[m]), marker=".", label=NAMES.get(m, m))
    ax.set_xlabel("training wall time per worker (s)")
    ax.set_ylabel(f"training loss (all workers' steps, {width:.0f} s bins, mean of 3)")
    ax.set_title(a.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "loss_wall.png"), dpi=110)

    meta = open(os.path.join(raw, "meta.txt")).read().strip() if os.path.exists(
        os.path.join(raw, "meta.txt")) else ""
    lines = ["# Training loss vs wall time (bench/dgs/loss_wall.sh)", "", meta, "",
             "| mode | steps per worker (median) | step (median of per-worker means) | "
             "samples/s, all workers | loss, last 10% of the time | time to (smoothed) loss "
             f"{common:.3f} | test accuracy at the end |", "|---|---|---|---|---|---|---|"]
    batch = int(re.search(r"batch (\d+)", meta).group(1)) if "batch" in meta else 0
    for m in ("ddp", "asgd", "dgs"):
        if m not in runs:
            continue
        rows = runs[m]
        per_rank = {}
        for r, s, w, _ in rows:
            per_rank[r] = max(per_rank.get(r, (0, 0.0)), (s, w))
        steps = statistics.median(s for s, _ in per_rank.values())
        step_s = statistics.median(w / s for s, w in per_rank.values() if s)
        sps = sum(s * batch / w for s, w in per_rank.values() if w)
        tail = [l for _, _, w, l in rows if w >= 0.9 * horizon] or [rows[-1][3]]
        reach = first_at_or_below(curves[m], common)
        acc = last_row(os.path.join(raw, f"{m}.csv")).get("test_acc", "")
        acc = f"{100 * float(acc):.2f}%" if acc else "-"
        lines.append(f"| {NAMES.get(m, m)} | {steps:.0f} | {step_s:.3f} s | {sps:.0f} | "
                     f"{statistics.fmean(tail):.3f} | "
                     f"{'-' if reach is None else f'{reach:.0f} s'} | {acc} |")
    lines += ["", "![loss vs wall time](loss_wall.png)", ""]
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
