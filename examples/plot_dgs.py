#!/usr/bin/python3
"""Training loss vs wall time and test accuracy vs epoch, one line per run, from
CSVs that train_dgs_fashion_mnist.py --csv (column 'mode') or
train_fashion_mnist.py --csv (column 'algorithm') write (python3-matplotlib).

    /usr/bin/python3 examples/plot_dgs.py out.png a.csv [b.csv ...] [--title T]
"""
import argparse
import csv
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def read_runs(paths):
    runs = OrderedDict()
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                name = row.get("mode") or row.get("algorithm")
                if name is None:
                    raise SystemExit(f"plot_dgs: {path} has neither a 'mode' nor an 'algorithm' column")
                runs.setdefault(name, []).append(row)
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("png")
    p.add_argument("csv", nargs="+")
    p.add_argument("--title", default="Fashion-MNIST, 4 workers: sync dense vs ASGD vs DGS")
    args = p.parse_args()
    runs = read_runs(args.csv)
    if not runs:
        raise SystemExit("plot_dgs: no rows")
    fig, (ax_wall, ax_epoch) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, rows in runs.items():
        rows.sort(key=lambda r: int(r["epoch"]))
        wall = [float(r["wall_s"]) for r in rows]
        loss = [float(r["train_loss"]) for r in rows]
        epochs = [int(r["epoch"]) for r in rows]
        acc = [100 * float(r["test_acc"]) for r in rows]
        ax_wall.plot(wall, loss, marker="o", label=name)
        ax_epoch.plot(epochs, acc, marker="o", label=name)
    ax_wall.set_xlabel("training wall time (s)")
    ax_wall.set_ylabel("mean training loss of the epoch")
    ax_wall.set_yscale("log")
    ax_epoch.set_xlabel("epoch")
    ax_epoch.set_ylabel("test accuracy (%)")
    ax_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (ax_wall, ax_epoch):
        ax.grid(alpha=0.3)
    ax_epoch.legend(fontsize=8)
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"plot_dgs: wrote {args.png} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
