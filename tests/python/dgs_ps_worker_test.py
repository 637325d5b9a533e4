#!/usr/bin/python3
"""gradex's whole parameter-server path (gradex._C.PsWorker: rank 0's embedded
coordinator and hosted server shard, UCX over loopback, DgsPushPull, the
frames) against gradex.dgs_reference, bit for bit: three workers in one
process step one at a time in a seeded order on integer-valued gradients;
after every step the stepping worker's parameters must equal the reference's
exactly (sparse DGS with an lr change, and ASGD). Exit 77 (skipped) without torch or without _C.PsWorker.

    dgs_ps_worker_test.py [--steps 180]
"""
import argparse
import random
import sys
import threading

try:
    import torch
except ImportError:
    print("dgs_ps_worker_test: no torch in this Python; skipped")
    sys.exit(77)

import gradex._C as _C
from gradex.dgs_reference import Layout, ServerRef, WorkerRef

if not hasattr(_C, "PsWorker"):
    print("dgs_ps_worker_test: this gradex build has no _C.PsWorker; skipped")
    sys.exit(77)


class Store:
    """An in-process rendezvous store (rank 0 publishes its coordinator)."""

    def __init__(self):
        self.cv = threading.Condition()
        self.kv = {}

    def set(self, key, value):
        with self.cv:
            self.kv[key] = value
            self.cv.notify_all()

    def get(self, key):
        with self.cv:
            if not self.cv.wait_for(lambda: key in self.kv, timeout=60):
                raise RuntimeError(f"rendezvous: '{key}' not set within 60 s")
            return self.kv[key]


def create_workers(world, sizes, density, momentum, wd, lr0):
    store, workers, errors = Store(), [None] * world, [None] * world

    def make(rank):
        try:
            workers[rank] = _C.PsWorker(sizes, density=density, momentum=momentum,
                                        weight_decay=wd, lr0=lr0, max_staleness=0,
                                        use_environment=False, rendezvous_set=store.set,
                                        rendezvous_get=store.get, rank=rank, world_size=world,
                                        timeout_s=60.0, job=f"dgs-ps-test-{density}")
        except Exception as e:  # reported below, with the rank
            errors[rank] = e

    threads = [threading.Thread(target=make, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for r, e in enumerate(errors):
        if e is not None or workers[r] is None:
            raise SystemExit(f"FAIL: worker {r} not created: {e}")
    return workers


def run_case(name, sizes, world, density, momentum, wd, lr0, steps, seed):
    rng = random.Random(seed)
    total = sum(sizes)
    init = torch.tensor([float(rng.randint(-5, 5)) for _ in range(total)])
    workers = create_workers(world, sizes, density, momentum, wd, lr0)
    layout = Layout(sizes)
    server = ServerRef(layout, init)
    refs = [WorkerRef(layout, lr0, momentum, wd, density) for _ in range(world)]
    params = [init.clone() for _ in range(world)]
    mine = [init.clone() for _ in range(world)]
    # The first step wires the epoch's communicator up, which every member
    # enters together: all workers take it at once, with zero gradients (an
    # empty push, an empty pull: the same whatever the order, but for the
    # version each joined at, which only the periodic full sync would see;
    # it stays out of reach here, and dgs_cpp_reference covers it).
    errors = []

    def first(k):
        try:
            workers[k].step(torch.zeros(total), params[k], lr0)
        except Exception as e:
            errors.append(f"worker {k}: {e}")

    threads = [threading.Thread(target=first, args=(k,)) for k in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise SystemExit(f"FAIL {name}: the first step: {errors}")
    for k in range(world):
        WorkerRef.apply_pull(server.join(k), mine[k])
    for k in range(world):
        WorkerRef.apply_pull(server.push_pull(k, refs[k].make_push(torch.zeros(total), mine[k],
                                                                   lr0)), mine[k])
        if not torch.equal(params[k], mine[k]):
            raise SystemExit(f"FAIL {name}: worker {k} after its first step")
    try:
        for s in range(steps):
            k = rng.randrange(world)
            lr = lr0 if s < steps // 2 else lr0 / 2
            grad = torch.tensor([float(rng.randint(-8, 8)) for _ in range(total)])
            workers[k].step(grad.clone(), params[k], lr)
            push = refs[k].make_push(grad, mine[k], lr)
            WorkerRef.apply_pull(server.push_pull(k, push), mine[k])
            if not torch.equal(params[k], mine[k]):
                diff = torch.nonzero(params[k] != mine[k]).squeeze(1).tolist()
                print(f"FAIL {name}: step {s} (worker {k}, version {server.version}): "
                      f"parameters differ at {diff[:10]}\n  gradex: {params[k][diff[:5]].tolist()}"
                      f"\n  ref:    {mine[k][diff[:5]].tolist()}\n  stats: {workers[k].stats()}")
                return False
        stats = [w.stats() for w in workers]
    finally:
        for k in sorted(range(world), reverse=True):  # rank 0 (the host) last
            workers[k].close()
    epochs = {st["epochs_entered"] for st in stats}
    fulls = sum(st["full_syncs"] for st in stats)
    print(f"ok   {name}: {steps} steps bitwise equal; server version {server.version}, "
          f"{fulls} full syncs, epochs entered {sorted(epochs)}, staleness seen "
          f"{max(st['max_staleness_seen'] for st in stats)}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=120,
                    help="DGS case (with the 3 first steps, below 150 versions)")
    a = ap.parse_args()
    ok = run_case("dgs 1/8, m 1/2", [12, 20, 7], 3, 0.125, 0.5, 0.0, 1.0, a.steps, seed=1)
    ok &= run_case("asgd, m 1/2", [12, 20, 7], 3, 1.0, 0.5, 0.0, 1.0, 30, seed=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
