#!/usr/bin/python3
"""Test accuracy vs epoch and vs wall time, one line per algorithm, from the
CSV that train_fashion_mnist.py --csv writes (Debian's python3-matplotlib).

    /usr/bin/python3 examples/plot_accuracy.py results.csv accuracy.png
"""
from plot_common import columns, epoch_axis, finish, parser, read_runs, two_panels


def main():
    p = parser(__doc__)
    p.add_argument("csv")
    p.add_argument("png")
    p.add_argument("--title", default="Fashion-MNIST, DDP on CPU (gloo), density 0.01")
    args = p.parse_args()
    runs = read_runs([args.csv], lambda path, row: row["algorithm"])
    if not runs:
        raise SystemExit(f"plot_accuracy: no rows in {args.csv}")
    fig, (ax_epoch, ax_wall) = two_panels()
    for name, rows in runs.items():
        epochs, wall, acc = columns(rows)
        style = dict(marker="o", linewidth=2.5 if name == "dense" else 1.5,
                     color="black" if name == "dense" else None)
        ax_epoch.plot(epochs, acc, label=name, **style)
        ax_wall.plot(wall, acc, label=name, **style)
    epoch_axis(ax_epoch)
    ax_wall.set_xlabel("training wall time (s)")
    ax_wall.set_ylabel("test accuracy (%)")
    finish("plot_accuracy", fig, (ax_epoch, ax_wall), ax_epoch, args.title, args.png, runs)


if __name__ == "__main__":
    main()
