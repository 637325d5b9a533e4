#!/usr/bin/python3
"""The C++ DGS state (DgsWorkerState, DgsServerShard, their wire frames; run by
dgs_trace) against gradex.dgs_reference, bit for bit: every push (indices and
values), every pull (full or sparse, indices and values) and the stepping
worker's parameters after it, on integer-valued gradients in a seeded
asynchronous order. Exit 77 (skipped) without torch.

    dgs_cpp_reference_test.py --trace-bin build/tests/python/dgs_trace
"""
import argparse
import random
import subprocess
import sys

try:
    import torch
except ImportError:
    print("dgs_cpp_reference_test: no torch in this Python; skipped")
    sys.exit(77)

from gradex.dgs_reference import Layout, ServerRef, WorkerRef


def script(sizes, workers, density, momentum, wd, lr0, full_sync_every, steps, seed):
    """A random schedule: (init, [(k, lr, grad)]). lr halves at the midpoint
    when lr_schedule, so that R = density*lr/lr0 changes."""
    rng = random.Random(seed)
    total = sum(sizes)
    init = [float(rng.randint(-5, 5)) for _ in range(total)]
    plan = []
    for s in range(steps):
        k = rng.randrange(workers)
        lr = lr0 if s < steps // 2 else lr0 / 2
        plan.append((k, lr, [float(rng.randint(-8, 8)) for _ in range(total)]))
    head = (f"{len(sizes)} {' '.join(map(str, sizes))}\n"
            f"{workers} {density} {momentum} {wd} {lr0} {full_sync_every} {steps}\n")
    body = " ".join(repr(x) for x in init) + "\n" + "".join(
        f"{k} {lr!r} {' '.join(repr(x) for x in g)}\n" for k, lr, g in plan)
    return init, plan, head + body


def run_cpp(trace_bin, text):
    p = subprocess.run([trace_bin], input=text, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise SystemExit(f"dgs_trace failed ({p.returncode}): {p.stderr.strip()}")
    out = []
    for line in p.stdout.splitlines():
        t = line.split()
        k, n = int(t[0]), int(t[1])
        pos = 2
        push = [(int(t[pos + 2 * e]), float.fromhex(t[pos + 2 * e + 1])) for e in range(n)]
        pos += 2 * n
        kind, m = t[pos], int(t[pos + 1])
        pos += 2
        pull = [(int(t[pos + 2 * e]), float.fromhex(t[pos + 2 * e + 1])) for e in range(m)]
        pos += 2 * m
        params = [float.fromhex(x) for x in t[pos:]]
        out.append((k, push, kind, pull, params))
    return out


def run_reference(sizes, workers, density, momentum, wd, lr0, full_sync_every, init, plan):
    layout = Layout(sizes)
    server = ServerRef(layout, torch.tensor(init, dtype=torch.float32),
                       full_sync_every=full_sync_every)
    states = [WorkerRef(layout, lr0, momentum, wd, density) for _ in range(workers)]
    params = [server.join(k).values.clone() for k in range(workers)]
    out = []
    for k, lr, g in plan:
        push = states[k].make_push(torch.tensor(g, dtype=torch.float32), params[k], lr)
        pull = server.push_pull(k, push)
        WorkerRef.apply_pull(pull, params[k])
        # C++ pushes the signed change to M (-a); the reference, a (M -= a).
        pushed = [(int(i), -float(v)) for i, v in zip(push.indices, push.values)]
        if pull.full:
            pulled, kind = [(i, float(v)) for i, v in enumerate(pull.values)], "F"
        else:
            pulled, kind = [(int(i), float(v)) for i, v in zip(pull.indices, pull.values)], "S"
        out.append((k, pushed, kind, pulled, [float(x) for x in params[k]]))
    return out


CASES = [
    # name, sizes, workers, density, momentum, wd, lr0, full_sync_every, steps
    ("dgs 1/8, m 1/2", [12, 20, 7], 3, 0.125, 0.5, 0.0, 1.0, 25, 60),
    ("asgd, m 1/2", [12, 20, 7], 3, 1.0, 0.5, 0.0, 1.0, 10**6, 36),
    ("dgs 1/4, wd 1/4, lr 1/2", [16, 9], 2, 0.25, 0.5, 0.25, 0.5, 150, 10),
    ("dgs 1/16, m 1, one layer", [64], 4, 0.0625, 1.0, 0.0, 1.0, 7, 40),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace-bin", required=True)
    a = ap.parse_args()
    failures = 0
    for name, sizes, workers, density, m, wd, lr0, fse, steps in CASES:
        init, plan, text = script(sizes, workers, density, m, wd, lr0, fse, steps, seed=len(name))
        cpp = run_cpp(a.trace_bin, text)
        ref = run_reference(sizes, workers, density, m, wd, lr0, fse, init, plan)
        if len(cpp) != len(ref):
            print(f"FAIL {name}: {len(cpp)} C++ steps, {len(ref)} reference steps")
            failures += 1
            continue
        fulls = sum(r[2] == "F" for r in ref)
        bad = next((s for s, (c, r) in enumerate(zip(cpp, ref)) if c != r), None)
        if bad is not None:
            c, r = cpp[bad], ref[bad]
            what = [n for n, x, y in zip(("worker", "push", "kind", "pull", "params"), c, r)
                    if x != y]
            print(f"FAIL {name}: step {bad} differs in {what}\n  C++: {c}\n  ref: {r}")
            failures += 1
        else:
            pushed = sum(len(r[1]) for r in ref)
            print(f"ok   {name}: {steps} steps bitwise equal ({pushed} entries pushed, "
                  f"{fulls} full syncs)")
        if "asgd" not in name and fulls == len(ref):
            print(f"FAIL {name}: every pull was a full sync (the sparse path went untested)")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
