"""What examples/plot_accuracy.py and examples/plot_dgs.py share: matplotlib
without a display (Debian's python3-matplotlib), their runs read from the CSVs
of the training examples, and the two panels' common parts."""
import argparse
import csv
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402


def parser(doc):
    """The command line's parser, with the script's docstring as its help."""
    return argparse.ArgumentParser(description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def read_runs(paths, name_of):
    """Run name (name_of(path, row)) -> its rows in epoch order, runs in the
    order they first appear in the CSVs at paths."""
    runs = OrderedDict()
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                runs.setdefault(name_of(path, row), []).append(row)
    for rows in runs.values():
        rows.sort(key=lambda r: int(r["epoch"]))
    return runs


def columns(rows):
    """A run's epochs, training wall times (s) and test accuracies (%)."""
    return ([int(r["epoch"]) for r in rows], [float(r["wall_s"]) for r in rows],
            [100 * float(r["test_acc"]) for r in rows])


def two_panels():
    """The figure and its two side-by-side axes."""
    return plt.subplots(1, 2, figsize=(12, 4.5))


def epoch_axis(ax):
    """Test accuracy against whole epochs."""
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def finish(prog, fig, axes, legend_ax, title, png, runs):
    """Grids, the legend on legend_ax, the title; writes png and says so."""
    for ax in axes:
        ax.grid(alpha=0.3)
    legend_ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"{prog}: wrote {png} ({len(runs)} runs)")
