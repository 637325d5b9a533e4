#!/usr/bin/python3
"""One worker of the DGS throughput benchmark (bench/dgs/run.sh starts them,
each in its network namespace): the 25.19M-parameter MLP of
bench/train_step/model.py on a synthetic batch, stepped by
gradex.torch.DGSOptimizer (no DDP), at --density (1 = ASGD).

Per step it times forward + backward (compute) and opt.step() (the push-pull
with the server shard), and reads the bytes each way from opt.stats(). Writes
OUT/<tag>.rank<R>.json. Environment as bench/train_step (RANK, WORLD_SIZE,
MASTER_ADDR/PORT for torch's store, GRADEX_* for gradex).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "train_step"))
from model import CLASSES, IN_FEATURES, build_model, parameter_count  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--density", type=float, default=0.01, help="1: ASGD")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (the join)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--no-compute", action="store_true",
                   help="skip forward/backward: random gradients (the exchange alone)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=300)
    p.add_argument("--out", required=True)
    p.add_argument("--tag", required=True)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 1 or a.batch < 1 or not 0 < a.density <= 1:
        p.error("--steps, --warmup, --batch >= 1; --density in (0, 1]")
    return a


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    import gradex.torch as gx
    model = build_model(a.width)
    opt = gx.DGSOptimizer(model.parameters(), lr=a.lr, density=a.density, timeout_s=a.timeout_s)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, IN_FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (a.batch,), generator=gen)
    compute, exchange, total, sent, recv = [], [], [], [], []
    before = opt.stats()
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.no_compute:
            for q in model.parameters():
                q.grad = torch.randn(q.shape, generator=gen) * 0.01
        else:
            F.cross_entropy(model(x), y).backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        now = opt.stats()
        if s >= a.warmup:
            compute.append(t1 - t0)
            exchange.append(t2 - t1)
            total.append(t2 - t0)
            sent.append(now.get("sent_bytes", 0) - before.get("sent_bytes", 0))
            recv.append(now.get("recv_bytes", 0) - before.get("recv_bytes", 0))
        before = now
    stats = opt.stats()
    rec = dict(tag=a.tag, rank=rank, workers=world, density=a.density, batch=a.batch,
               parameters=parameter_count(model), no_compute=a.no_compute,
               step_s=total, compute_s=compute, exchange_s=exchange,
               sent_bytes=sent, recv_bytes=recv, stats={k: v for k, v in stats.items()
                                                         if isinstance(v, (int, float, str))})
    with open(os.path.join(a.out, f"{a.tag}.rank{rank}.json"), "w") as f:
        json.dump(rec, f)
    med = statistics.median(total)
    print(f"rank {rank}: median step {1000 * med:.0f} ms (exchange "
          f"{1000 * statistics.median(exchange):.0f} ms), {a.batch / med:.1f} samples/s, "
          f"push {statistics.median(sent) / 1e6:.2f} MB pull {statistics.median(recv) / 1e6:.2f} MB "
          "per step", flush=True)
    # Rank 0 hosts the coordinator and the server: the others leave first.
    dist.barrier()
    if rank != 0:
        opt.close()
    dist.barrier()
    if rank == 0:
        opt.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
