#!/usr/bin/python3
"""Summary of bench/dgs/run.sh's raw runs: per mode, the median step of the
slowest worker, throughput (samples/s over all workers), bytes per worker step
each way, and the step time next to the DGS authors' ~3.0 s per worker step
(25M elements, 3 workers + server, CPU). Writes OUT/summary.md and prints it.

    bench/dgs/report.py OUT
"""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

AUTHORS_STEP_S = 3.0  # the DGS authors' code, 25M elements, 3 workers + server, shared-memory MPI


def load(out):
    runs = defaultdict(list)  # mode -> [rank record]
    for path in sorted(glob.glob(os.path.join(out, "raw", "*.rank*.json"))):
        with open(path) as f:
            rec = json.load(f)
        mode = rec["tag"].rsplit("-r", 1)[0]
        runs[mode].append(rec)
    return runs


def ring_bytes(parameters, workers):
    """A dense ring allreduce's bytes each way per rank: 2(P-1)/P of the model."""
    return 2 * (workers - 1) / workers * parameters * 4


def summarize(mode, recs):
    by_round = defaultdict(list)
    for r in recs:
        by_round[r["tag"]].append(r)
    slowest, throughput, sent, recv, exch = [], [], [], [], []
    for tag, ranks in by_round.items():
        meds = [statistics.median(r["step_s"]) for r in ranks]
        slowest.append(max(meds))
        throughput.append(sum(r["batch"] / m for r, m in zip(ranks, meds)))
        if "sent_bytes" in ranks[0]:  # DGSOptimizer's stats()
            sent.append(statistics.median([statistics.median(r["sent_bytes"]) for r in ranks]))
            recv.append(statistics.median([statistics.median(r["recv_bytes"]) for r in ranks]))
            exch.append(max(statistics.median(r["exchange_s"]) for r in ranks))
    r0 = recs[0]
    workers = r0.get("workers", r0.get("world_size"))
    dense = "sent_bytes" not in r0  # train_step.py's DDP: gloo's ring, bytes from its model
    model_bytes = ring_bytes(r0["parameters"], workers) if dense else None
    return dict(mode=mode, workers=workers, parameters=r0["parameters"],
                density=r0.get("density", 1.0), rounds=len(by_round),
                step_ms=1000 * statistics.median(slowest),
                exchange_ms=1000 * statistics.median(exch) if exch else None,
                samples_s=statistics.median(throughput),
                push_mb=(model_bytes if dense else statistics.median(sent)) / 1e6,
                pull_mb=(model_bytes if dense else statistics.median(recv)) / 1e6,
                dense=dense, no_compute=r0.get("no_compute", False))


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    out = sys.argv[1]
    runs = load(out)
    if not runs:
        print(f"report: no raw/*.rank*.json under {out}", file=sys.stderr)
        return 1
    lines = ["# DGS vs ASGD through gradex's parameter server", ""]
    meta = os.path.join(out, "raw", "meta.txt")
    if os.path.exists(meta):
        lines += [open(meta).read().strip(), ""]
    lines += ["| mode | workers | parameters | density | rounds | step ms (slowest worker, median) "
              "| push-pull ms | samples/s (all workers) | push MB/step | pull MB/step |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for mode in sorted(runs):
        s = summarize(mode, runs[mode])
        name = mode + (" (no compute)" if s["no_compute"] else "") + (
            " (sync DDP, gloo allreduce; MB: ring model)" if s["dense"] else "")
        exch = "-" if s["exchange_ms"] is None else f"{s['exchange_ms']:.0f}"
        lines.append(f"| {name} | {s['workers']} "
                     f"| {s['parameters'] / 1e6:.2f}M | {s['density']} | {s['rounds']} "
                     f"| {s['step_ms']:.0f} | {exch} | {s['samples_s']:.1f} "
                     f"| {s['push_mb']:.2f} | {s['pull_mb']:.2f} |")
    auth = os.path.join(out, "raw", "authors-setting.txt")
    if os.path.exists(auth):
        lines += ["", "gradex's C++ path in the DGS authors' setting (gradex-dgs-bench --transport "
                  "ucx: 3 worker processes + 1 server process on this machine, 25M elements, "
                  "density 0.01; the authors' code: about 3.0 s per worker step):", ""]
        meds = []
        for line in open(auth):
            m = re.match(r"worker (\d+): step median ([0-9.]+) ms", line)
            if m:
                meds.append(float(m.group(2)))
            if line.startswith(("worker", "shard", "gradex-dgs-bench")):
                lines.append(f"    {line.rstrip()}")
        cpu = None
        tpath = os.path.join(out, "raw", "authors-setting.time")
        if os.path.exists(tpath):
            t = open(tpath).read().split()
            if len(t) >= 3 and t[0] == "cpu_s":
                cpu = float(t[1]) + float(t[2])
        steps = None
        m = re.search(r"shard 0: version (\d+)", open(auth).read())
        if m:
            steps = int(m.group(1))  # every worker step applied (warm-up included)
        if meds:
            text = (f"Slowest worker's median step {max(meds):.0f} ms wall: 3.0 s / that = "
                    f"{AUTHORS_STEP_S * 1000 / max(meds):.2f} (the goal is >= 10)")
            if cpu and steps:
                text += (f"; all 4 processes used {cpu:.1f} CPU-seconds for {steps} worker steps "
                         f"(process start, UCX wire-up, joins and warm-up included): "
                         f"{cpu / steps:.2f} CPU-s per worker step, 3.0 s / that = "
                         f"{AUTHORS_STEP_S * steps / cpu:.1f}")
            lines += ["", text + "."]
    ref = os.path.join(out, "raw", "reference_step.jsonl")
    if os.path.exists(ref):
        lines += ["", "Pure-PyTorch reference (gradex.dgs_reference, one process, same math, "
                  "no transport), bench/dgs/reference_step.py:", ""]
        for line in open(ref):
            r = json.loads(line)
            lines.append(f"- {r['elements'] / 1e6:.2f}M elements, {r['workers']} workers + server, "
                         f"density {r['density']}: step {r['step_ms_median']:.0f} ms wall, "
                         f"{r.get('step_cpu_ms_median', float('nan')):.0f} ms CPU "
                         f"(load {r['load1']})")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
