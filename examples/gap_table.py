#!/usr/bin/python3
"""Markdown table of each run's test accuracy per epoch and its gap to dense
at the same epoch, from the CSVs train_fashion_mnist.py --csv writes.

    /usr/bin/python3 examples/gap_table.py A.csv [B.csv ...] [--out gap.md]

A run is (algorithm, start_iter, momentum_in_hook); the dense rows of any
CSV are the reference (dense runs with the same seeds are identical). The
last column names the first epoch from which a run stays within 1 point of
dense (to its last epoch), or '-'.
"""
import argparse
import csv
from collections import OrderedDict


def run_name(r):
    name = r["algorithm"]
    if r["algorithm"] == "dense":
        return name
    mc = r.get("momentum_in_hook", "no")
    if mc and mc != "no":
        name += f", momentum correction ({mc})"
    if int(r.get("start_iter", 0) or 0):
        name += f", start_iter {r['start_iter']}"
    return name


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="+")
    p.add_argument("--out", default="", help="also write the table here")
    args = p.parse_args()
    runs, dense = OrderedDict(), {}
    for path in args.csv:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                e, acc = int(r["epoch"]), 100 * float(r["test_acc"])
                if r["algorithm"] == "dense":
                    dense[e] = acc
                got = runs.setdefault(run_name(r), {})
                if e in got and abs(got[e][0] - acc) > 1e-9:
                    raise SystemExit(f"gap_table: two '{run_name(r)}' runs differ at epoch {e}; "
                                     "give their CSVs to separate calls")
                got[e] = (acc, float(r["train_loss"]))
    epochs = sorted({e for got in runs.values() for e in got})
    lines = ["| run | " + " | ".join(f"epoch {e}" for e in epochs)
             + " | within 1 point from epoch |",
             "|---" * (len(epochs) + 2) + "|"]
    for name, got in runs.items():
        cells, within = [], "-"
        for e in epochs:
            if e not in got:
                cells.append("")
                continue
            acc = got[e][0]
            gap = "" if name == "dense" or e not in dense else f" ({acc - dense[e]:+.2f})"
            cells.append(f"{acc:.2f}{gap}")
        if name != "dense":
            ok = [e for e in sorted(got) if e in dense and got[e][0] >= dense[e] - 1.0]
            last = max(got)
            # The first epoch from which every later epoch stays within 1 point.
            for e in sorted(got):
                if all(x in ok for x in sorted(got) if x >= e):
                    within = str(e) if last in ok else "-"
                    break
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'' if name == 'dense' else within} |")
    text = "\n".join(lines) + "\n\nTest accuracy (%); in parentheses the gap to dense at the same epoch.\n"
    print(text, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
