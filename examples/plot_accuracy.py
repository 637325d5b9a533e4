#!/usr/bin/python3
"""Test accuracy vs epoch and vs wall time, one line per algorithm, from the
CSV that train_fashion_mnist.py --csv writes (Debian's python3-matplotlib).

    /usr/bin/python3 examples/plot_accuracy.py results.csv accuracy.png
"""
import argparse
import csv
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--title", default="Fashion-MNIST, DDP on CPU (gloo), density 0.01")
    args = p.parse_args()
    runs = OrderedDict()
    with open(args.csv, newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault(row["algorithm"], []).append(row)
    if not runs:
        raise SystemExit(f"plot_accuracy: no rows in {args.csv}")
    fig, (ax_epoch, ax_wall) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, rows in runs.items():
        rows.sort(key=lambda r: int(r["epoch"]))
        epochs = [int(r["epoch"]) for r in rows]
        wall = [float(r["wall_s"]) for r in rows]
        acc = [100 * float(r["test_acc"]) for r in rows]
        style = dict(marker="o", linewidth=2.5 if name == "dense" else 1.5,
                     color="black" if name == "dense" else None)
        ax_epoch.plot(epochs, acc, label=name, **style)
        ax_wall.plot(wall, acc, label=name, **style)
    ax_epoch.set_xlabel("epoch")
    ax_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_wall.set_xlabel("training wall time (s)")
    for ax in (ax_epoch, ax_wall):
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    ax_epoch.legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"plot_accuracy: wrote {args.png} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
