#!/usr/bin/python3
"""The table and plot of bench/accuracy/sweep.sh: per model and batch size,
each method's test accuracy after the last epoch as its gap to dense and to
PowerSGD of the same seed (points; the median over seeds, the range beside
it, the worst seed), and the bytes a rank sends per step (median over seeds).

    /usr/bin/python3 bench/accuracy/sweep_report.py sweep.csv [--table t.md] [--png p.png]
"""
import argparse
import csv
import statistics
from collections import OrderedDict


def load(path):
    """(model, batch) -> method -> seed -> the last epoch's row."""
    runs = OrderedDict()
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            cell = runs.setdefault((row["model"], int(row["batch"])), OrderedDict())
            seeds = cell.setdefault(row["algorithm"], {})
            seed = int(row["seed"])
            if seed not in seeds or int(row["epoch"]) >= int(seeds[seed]["epoch"]):
                seeds[seed] = row
    return runs


def acc(row):
    return 100 * float(row["test_acc"])


def gaps(seeds, ref):
    """This method's accuracy minus the reference's, on the seeds both ran."""
    return [acc(seeds[s]) - acc(ref[s]) for s in sorted(seeds) if s in ref]


def summary(values):
    if not values:
        return ""
    return (f"{statistics.median(values):+.2f} ({min(values):+.2f} .. {max(values):+.2f})")


def kbytes(seeds):
    return statistics.median(float(r["sent_bytes_per_step"]) for r in seeds.values()) / 1000


def table(runs):
    head = ["model", "batch", "method", "seeds", "accuracy, median", "gap to dense: median (range)",
            "gap to PowerSGD: median (range)", "kB sent a rank a step"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (model, batch), methods in runs.items():
        dense, psgd = methods.get("dense", {}), methods.get("powersgd", {})
        for m, seeds in methods.items():
            cells = [model, str(batch), m, ",".join(str(s) for s in sorted(seeds)),
                     f"{statistics.median(acc(r) for r in seeds.values()):.2f}",
                     "" if m == "dense" else summary(gaps(seeds, dense)),
                     "" if m == "powersgd" else summary(gaps(seeds, psgd)),
                     f"{kbytes(seeds):.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cells = list(runs.items())
    fig, axes = plt.subplots(1, len(cells), figsize=(3.2 * len(cells), 3.6), sharey=True,
                             squeeze=False)
    for ax, ((model, batch), methods) in zip(axes[0], cells):
        dense = methods.get("dense", {})
        names = [m for m in methods if m != "dense"]
        for x, m in enumerate(names):
            g = gaps(methods[m], dense)
            ax.scatter([x] * len(g), g, s=14, color="tab:blue")
            if g:
                ax.hlines(statistics.median(g), x - 0.3, x + 0.3, color="black")
        ax.axhline(0, color="grey", lw=0.8)
        ax.axhline(-0.5, color="grey", lw=0.6, ls="--")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=60, fontsize=8)
        ax.set_title(f"{model}, batch {batch}", fontsize=9)
    axes[0][0].set_ylabel("test accuracy - dense's, points (last epoch)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv")
    p.add_argument("--table", default="", help="write the markdown table here too")
    p.add_argument("--png", default="", help="the plot (needs matplotlib)")
    args = p.parse_args()
    runs = load(args.csv)
    t = table(runs)
    print(t)
    if args.table:
        with open(args.table, "w") as f:
            f.write(t + "\n")
    if args.png:
        plot(runs, args.png)
        print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
