#!/usr/bin/python3
"""Training loss vs wall time and test accuracy vs epoch, one line per run, from
CSVs that train_dgs_fashion_mnist.py --csv (column 'mode') or
train_fashion_mnist.py --csv (column 'algorithm') write (python3-matplotlib).

    /usr/bin/python3 examples/plot_dgs.py out.png a.csv [b.csv ...] [--title T]
"""
from plot_common import columns, epoch_axis, finish, parser, read_runs, two_panels


def run_name(path, row):
    name = row.get("mode") or row.get("algorithm")
    if name is None:
        raise SystemExit(f"plot_dgs: {path} has neither a 'mode' nor an 'algorithm' column")
    return name


def main():
    p = parser(__doc__)
    p.add_argument("png")
    p.add_argument("csv", nargs="+")
    p.add_argument("--title", default="Fashion-MNIST, 4 workers: sync dense vs ASGD vs DGS")
    args = p.parse_args()
    runs = read_runs(args.csv, run_name)
    if not runs:
        raise SystemExit("plot_dgs: no rows")
    fig, (ax_wall, ax_epoch) = two_panels()
    for name, rows in runs.items():
        epochs, wall, acc = columns(rows)
        loss = [float(r["train_loss"]) for r in rows]
        ax_wall.plot(wall, loss, marker="o", label=name)
        ax_epoch.plot(epochs, acc, marker="o", label=name)
    ax_wall.set_xlabel("training wall time (s)")
    ax_wall.set_ylabel("mean training loss of the epoch")
    ax_wall.set_yscale("log")
    epoch_axis(ax_epoch)
    finish("plot_dgs", fig, (ax_wall, ax_epoch), ax_epoch, args.title, args.png, runs)


if __name__ == "__main__":
    main()
