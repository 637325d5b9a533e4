#!/usr/bin/python3
"""The accuracy table and plot of bench/accuracy/run.sh: per optimizer, each
run's test accuracy per epoch and its gap to the dense run of the same
optimizer at the same epoch (points), and a PNG with one panel per optimizer.

    /usr/bin/python3 bench/accuracy/report.py accuracy.csv --png docs/accuracy.png [--table t.md]
"""
import argparse
import csv
from collections import OrderedDict


def load(path):
    runs = OrderedDict()  # (optimizer, algorithm) -> {epoch: row}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            runs.setdefault((row.get("optimizer", "sgd"), row["algorithm"]), {})[
                int(row["epoch"])] = row
    return runs


def table(runs):
    epochs = sorted({e for rows in runs.values() for e in rows})
    head = ["optimizer", "run"] + [f"epoch {e}" for e in epochs] + ["train loss, last", "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (opt, algo), rows in runs.items():
        dense = runs.get((opt, "dense"), {})
        cells = []
        for e in epochs:
            if e not in rows:
                cells.append("")
                continue
            acc = 100 * float(rows[e]["test_acc"])
            gap = "" if algo == "dense" or e not in dense else \
                f" ({acc - 100 * float(dense[e]['test_acc']):+.2f})"
            cells.append(f"{acc:.2f}{gap}")
        last = rows[max(rows)]
        lines.append("| " + " | ".join([opt, algo] + cells + [last["train_loss"], last["wall_s"]])
                     + " |")
    return "\n".join(lines)


def plot(runs, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    opts = list(dict.fromkeys(opt for opt, _ in runs))
    fig, axes = plt.subplots(1, len(opts), figsize=(6 * len(opts), 4.5), squeeze=False)
    for ax, opt in zip(axes[0], opts):
        for (o, algo), rows in runs.items():
            if o != opt:
                continue
            epochs = sorted(rows)
            acc = [100 * float(rows[e]["test_acc"]) for e in epochs]
            ax.plot(epochs, acc, marker="o", label=algo,
                    linewidth=2.5 if algo == "dense" else 1.5,
                    color="black" if algo == "dense" else None)
        ax.set_title(f"{opt}, handed over (GradexState(optimizer=opt))")
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy (%)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--png", default="")
    p.add_argument("--table", default="")
    p.add_argument("--title", default="Fashion-MNIST MLP, 4 ranks on CPU (gloo), density 0.01")
    args = p.parse_args()
    runs = load(args.csv)
    if not runs:
        raise SystemExit(f"report: no rows in {args.csv}")
    text = table(runs)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")
    if args.png:
        plot(runs, args.png, args.title)
        print(f"report: wrote {args.png}")


if __name__ == "__main__":
    main()
