#!/usr/bin/python3
"""Time of one DGS worker step of the pure-PyTorch reference (gradex.dgs_reference)
on the 25.19M-parameter layout of bench/train_step/model.py: W workers and
one server in this process (the authors' setting is 3 workers + 1 server),
random normal gradients, round-robin. A worker step = the worker's SAMomentum
and top-R selection + the server's push, difference, secondary compression
+ the worker applying the pull: everything but the transport, on one thread.

Prints per-phase medians (ms; also the step's CPU time, which a loaded
machine inflates less than its wall time) and one JSON line (--json-out appends it). A
measurement, not a test: nothing here passes or fails on a time.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "train_step"))
from model import build_model  # noqa: E402

from gradex.dgs_reference import Layout, ServerRef, WorkerRef  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=6, help="timed worker steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed worker steps first")
    p.add_argument("--width", type=int, default=4096, help="model.py's width (4096: 25.19M)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json-out", default="")
    a = p.parse_args()
    if a.workers < 1 or a.steps < 1 or a.warmup < 0 or not 0 < a.density <= 1:
        p.error("--workers, --steps >= 1, --warmup >= 0, --density in (0, 1]")
    torch.set_num_threads(a.threads)
    params = list(build_model(a.width).parameters())
    layout = Layout([q.numel() for q in params])
    init = torch.cat([q.detach().reshape(-1) for q in params])
    del params
    server = ServerRef(layout, init)
    workers = [WorkerRef(layout, 0.1, 0.9, 5e-4, a.density) for _ in range(a.workers)]
    flat = [server.join(k).values for k in range(a.workers)]
    gen = torch.Generator().manual_seed(0)
    phases = {"push": [], "server": [], "apply": [], "step": [], "step_cpu": []}
    for s in range(a.warmup + a.steps):
        k = s % a.workers
        g = torch.randn(layout.total, generator=gen) * 0.01
        c0 = time.process_time()
        t0 = time.perf_counter()
        push = workers[k].make_push(g, flat[k], 0.1)
        t1 = time.perf_counter()
        pull = server.push_pull(k, push)
        t2 = time.perf_counter()
        WorkerRef.apply_pull(pull, flat[k])
        t3 = time.perf_counter()
        c3 = time.process_time()
        if s >= a.warmup:
            phases["step_cpu"].append(c3 - c0)
            for name, v in (("push", t1 - t0), ("server", t2 - t1), ("apply", t3 - t2),
                            ("step", t3 - t0)):
                phases[name].append(v)
    med = {k: 1000 * statistics.median(v) for k, v in phases.items()}
    load = open("/proc/loadavg").read().split()[0]
    print(f"reference DGS worker step, {layout.total} elements in {len(layout.sizes)} layers, "
          f"{a.workers} workers + server in one process, density {a.density}, "
          f"{a.threads} thread(s), load {load}: step {med['step']:.0f} ms wall, "
          f"{med['step_cpu']:.0f} ms CPU (wall: worker push "
          f"{med['push']:.0f}, server {med['server']:.0f}, apply {med['apply']:.0f})")
    rec = dict(kind="reference", elements=layout.total, workers=a.workers, density=a.density,
               threads=a.threads, steps=a.steps, load1=float(load),
               **{f"{k}_ms_median": round(v, 2) for k, v in med.items()},
               step_ms_all=[round(1000 * v, 2) for v in phases["step"]])
    print(json.dumps(rec))
    if a.json_out:
        with open(a.json_out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
