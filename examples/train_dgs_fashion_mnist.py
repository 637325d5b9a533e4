#!/usr/bin/python3
"""Fashion-MNIST through a parameter server: ASGD (density 1) and DGS
(dual-way sparsification with SAMomentum, density 0.01), against synchronous
dense training, on CPU.

Two backends:

  reference  N workers and one server simulated in one process with the exact
             pure-PyTorch math of gradex.dgs_reference (modes sync, asgd, dgs):
             examples/train_dgs_fashion_mnist.py --backend reference --mode dgs
  gradex     one process per worker, launched by scripts/launch or torchrun,
             each stepping gradex.torch.DGSOptimizer (no DDP) against gradex's
             server shard (modes asgd, dgs; dense DDP is
             examples/train_fashion_mnist.py --algorithm dense):
             scripts/launch -n 4 -- /usr/bin/python3 \\
                 examples/train_dgs_fashion_mnist.py --backend gradex --mode dgs

Same seeds, model (train_fashion_mnist.py's MLP) and epochs in every mode.
Appends one CSV row per epoch (--csv): test accuracy of the global model,
mean training loss, wall time, staleness and entries moved per step.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_fashion_mnist import (DATA_DIR, add_log_args, append_csv, evaluate,  # noqa: E402
                                 load_split, load_test, make_model)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("reference", "gradex"), default="reference")
    p.add_argument("--mode", choices=("sync", "asgd", "dgs"), default="dgs")
    p.add_argument("--workers", type=int, default=4, help="reference backend: simulated workers")
    p.add_argument("--density", type=float, default=0.01, help="DGS's R (asgd: 1)")
    p.add_argument("--lr", type=float, default=0.05, help="lr0, the first epoch's learning rate")
    p.add_argument("--lr-decay", type=float, default=1.0, help="lr multiplier per epoch")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--full-sync-every", type=int, default=150)
    p.add_argument("--schedule", choices=("random", "round-robin"), default="random",
                   help="reference backend: order of the workers' steps in each round")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-rounds", type=int, default=0,
                   help="stop after this many rounds (reference) or steps per worker (0: none)")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="gradex backend: each worker stops once it has trained this long (0: none)")
    add_log_args(p)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--hidden", default="256,128", help="MLP hidden sizes")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--timeout-s", type=float, default=60.0, help="gradex backend: per step")
    p.add_argument("--max-staleness", type=int, default=None, help="gradex backend")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--csv", default="", help="append one row per epoch here")
    p.add_argument("--label", default="", help="the CSV's mode column (default: --mode)")
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit 4 if the last epoch's test accuracy is below this")
    a = p.parse_args(argv)
    if a.workers < 1 or a.epochs < 1 or a.batch_size < 1:
        p.error("--workers, --epochs and --batch-size must be >= 1")
    if not 0 < a.density <= 1:
        p.error(f"--density must be in (0, 1], got {a.density}")
    if a.backend == "gradex" and a.mode == "sync":
        p.error("--backend gradex runs asgd or dgs; synchronous dense DDP is "
                "examples/train_fashion_mnist.py --algorithm dense")
    return a


def run_reference(args, data):
    from dgs_sim import simulate
    hidden = tuple(int(h) for h in args.hidden.split(",") if h)

    def model():
        return make_model(argparse.Namespace(seed=args.seed, hidden=",".join(map(str, hidden))))

    def show(row):
        extra = (f" staleness {row['mean_staleness']:.2f} push {row['push_entries_per_step']:.0f}"
                 f" pull {row['pull_entries_per_step']:.0f} entries/step"
                 if "mean_staleness" in row else "")
        print(f"[{row['mode']}] epoch {row['epoch']} steps {row['steps']} wall {row['wall_s']:.1f}s "
              f"train_loss {row['train_loss']:.4f} test_acc {100 * row['test_acc']:.2f}%{extra}",
              flush=True)

    return simulate(args, model, data, evaluate, on_epoch=show)


def run_gradex(args, data):
    from gradex_dgs_worker import train_worker
    return train_worker(args, data)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    x_train, y_train = load_split(args.data_dir, "train")
    x_test, y_test = load_test(args)
    data = (x_train, y_train, x_test, y_test)
    rows = (run_reference if args.backend == "reference" else run_gradex)(args, data)
    if args.label:
        for r in rows:
            r["mode"] = args.label
    if rows and args.csv:
        append_csv(args.csv, rows)
    if rows and rows[-1]["test_acc"] < args.min_accuracy:
        print(f"test accuracy {rows[-1]['test_acc']:.4f} below --min-accuracy "
              f"{args.min_accuracy}", flush=True)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
