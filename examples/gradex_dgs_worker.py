"""One worker process of examples/train_dgs_fashion_mnist.py --backend gradex:
gradex.torch.DGSOptimizer, no DDP, no barrier between steps.

torch.distributed (gloo) is initialised only for its store (the embedded
coordinator's address and token, as GradexState finds them) and for the
end-of-epoch bookkeeping, never inside a step. Each worker trains on its 1/N
share of every epoch; rank 0 evaluates its own model (the server's model as
of its last pull) after each epoch and writes the rows.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from train_fashion_mnist import StepLog, evaluate, make_model, train_step


def _init():
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            sys.exit(f"train_dgs_fashion_mnist: {var} is not set; launch --backend gradex with "
                     "scripts/launch or torchrun")
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def _reduce(values, op=dist.ReduceOp.SUM):
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return t.tolist()


def train_worker(args, data):
    import gradex.torch as gx
    x_train, y_train, x_test, y_test = data
    rank, world = _init()
    model = make_model(args)
    density = 1.0 if args.mode == "asgd" else args.density
    opt = gx.DGSOptimizer(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.weight_decay, density=density,
                          max_staleness=args.max_staleness, timeout_s=args.timeout_s)
    rows, wall, step, all_steps = [], 0.0, 0, 0
    n = len(x_train) - len(x_train) % (world * args.batch_size)
    log = StepLog(args.step_log, rank)
    # No barrier: each worker leaves on its own clock (the others keep stepping).
    over_budget = False
    try:
        for epoch in range(1, args.epochs + 1):
            order = torch.randperm(len(x_train),
                                   generator=torch.Generator().manual_seed(args.seed + epoch))
            mine = order[:n][rank::world]
            for g in opt.param_groups:
                g["lr"] = args.lr * (args.lr_decay ** (epoch - 1))
            losses = []
            t0 = time.perf_counter()
            for i in range(0, len(mine), args.batch_size):
                idx = mine[i:i + args.batch_size]
                losses.append(train_step(model, opt, x_train[idx], y_train[idx]))
                step += 1
                log.add(step, wall + time.perf_counter() - t0, losses[-1])
                over_budget = 0 < args.time_budget_s <= wall + time.perf_counter() - t0
                if (args.max_rounds and step >= args.max_rounds) or over_budget:
                    break
            wall += time.perf_counter() - t0
            s = opt.stats()
            # Epoch-end bookkeeping only: the steps above ran without a barrier.
            loss_sum, count, sent, recv = _reduce(
                [float(np.sum(losses)), len(losses), s.get("sent_bytes", 0), s.get("recv_bytes", 0)])
            (wall_max,) = _reduce([wall], dist.ReduceOp.MAX)
            all_steps += int(count)  # stats() bytes are totals since the start
            acc = evaluate(model, x_test, y_test) if rank == 0 else float("nan")
            row = dict(mode=args.mode, density=density, workers=world, epoch=epoch,
                       steps=all_steps, wall_s=round(wall_max, 3),
                       train_loss=round(loss_sum / max(1, count), 5), test_acc=round(acc, 5),
                       version=s.get("version", -1), staleness=s.get("staleness", -1),
                       push_bytes_per_step=round(sent / max(1, all_steps), 1),
                       pull_bytes_per_step=round(recv / max(1, all_steps), 1))
            rows.append(row)
            if rank == 0:
                print(f"[{args.mode}] epoch {epoch} steps {row['steps']} wall {row['wall_s']:.1f}s "
                      f"train_loss {row['train_loss']:.4f} test_acc {100 * acc:.2f}% "
                      f"push {row['push_bytes_per_step']:.0f} B/step "
                      f"pull {row['pull_bytes_per_step']:.0f} B/step", flush=True)
            if (args.max_rounds and step >= args.max_rounds) or over_budget:
                break
    finally:
        log.close()
        opt.close()
    return rows if rank == 0 else []
