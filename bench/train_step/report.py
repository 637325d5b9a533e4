"""Tables of bench/train_step/run.sh.

  report.py OUT                     steps.csv, summary.md (printed too)
  report.py --buckets RAW ROUND     "algorithm elements" per bucket the gradex
                                    runs of ROUND exchanged (for gradex-bench)

A step's time is the slowest rank's (forward + backward + SGD step; DDP's
backward ends when every bucket's exchange has). The hook's exchange time of a
bucket is its selection + communication + reduction in the client's timeline
(GRADEX_TIMELINE), per rank; the bare exchange is gradex-bench's median call
(a barrier first, slowest rank) for that algorithm and size in the same
namespaces. Overhead = (hook - bare) / bare, per step, summed over buckets.
"""
import csv
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict

PHASES = ("selection", "communication", "reduction")


def runs(raw):
    """{tag: [rank results]} of the finished runs."""
    out = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(raw, "*.rank*.json"))):
        if ".timeline." in path:
            continue
        with open(path) as f:
            r = json.load(f)
        out[r["tag"]].append(r)
    return out


def round_of(tag):
    return int(re.search(r"-r(\d+)$", tag).group(1))


def last_layouts(stats, calls):
    """The bucket layouts of the last steps (DDP rebuilds its buckets after the
    first step: the first layout's entries stay in stats with fewer calls)."""
    return [b for b in stats if b["calls"] >= calls]


def buckets(raw, rnd):
    seen = []
    for tag, ranks in sorted(runs(raw).items()):
        if not tag.startswith("gradex-") or round_of(tag) != rnd:
            continue
        r0 = min(ranks, key=lambda r: r["rank"])
        teams = 1
        with open(os.path.join(raw, f"{tag}.rank{r0['rank']}.log")) as f:
            m = re.search(r"epoch 1: \d+ members, (\d+) teams", f.read())
            if m:  # the embedded coordinator's choice, logged on rank 0
                teams = int(m.group(1))
        for b in last_layouts(r0.get("stats", []), len(r0["step_s"])):
            key = (b["algorithm"], b["elements"], teams)
            if key not in seen:
                seen.append(key)
    for algo, n, teams in seen:
        print(algo, n, teams)


def timeline(raw, tag, first_step):
    """{step: {bucket: {rank: {phase: s}, "algorithm", "elements"}}} of timed steps."""
    steps = defaultdict(lambda: defaultdict(lambda: {"ranks": defaultdict(dict)}))
    for path in glob.glob(os.path.join(raw, f"{tag}.timeline.rank*.json")):
        with open(path) as f:
            events = json.load(f)
        for e in events:
            if e.get("ph") != "X":
                continue
            a = e["args"]
            if a["step"] < first_step or e["name"] not in PHASES + ("queue",):
                continue
            b = steps[a["step"]][a["bucket"]]
            b["algorithm"], b["elements"] = a["algorithm"], a["elements"]
            ph = b["ranks"][e["pid"]]
            ph[e["name"]] = e["dur"] / 1e6
            # The exchange runs from the selection's start to the reduction's end.
            if e["name"] == "selection":
                ph["start"] = e["ts"] / 1e6
            elif e["name"] == "reduction":
                ph["end"] = (e["ts"] + e["dur"]) / 1e6
    return steps


def bare_times(raw):
    """{(algorithm, elements): median over rounds of gradex-bench's median call}."""
    got = defaultdict(list)
    for path in glob.glob(os.path.join(raw, "bare-r*.jsonl")):
        with open(path) as f:
            for line in f:
                if line.strip():
                    j = json.loads(line)
                    got[(j["algo"], int(j["elements"]))].append(float(j["median_s"]))
    return {k: statistics.median(v) for k, v in got.items()}


def med(v):
    return statistics.median(v) if v else float("nan")


def report(out):
    raw = os.path.join(out, "raw")
    all_runs = runs(raw)
    if not all_runs:
        sys.exit(f"report: no finished runs in {raw}")
    mode_steps = defaultdict(list)    # mode -> slowest-rank step times, every round
    round_med = defaultdict(dict)     # mode -> {round: median}
    rows = []
    for tag, ranks in sorted(all_runs.items(), key=lambda kv: (round_of(kv[0]), kv[0])):
        mode = ranks[0]["mode"]
        n = min(len(r["step_s"]) for r in ranks)
        slowest = [max(r["step_s"][i] for r in ranks) for i in range(n)]
        if len(ranks) < ranks[0]["world_size"]:
            print(f"report: {tag} has {len(ranks)} of {ranks[0]['world_size']} ranks; skipped")
            continue
        mode_steps[mode] += slowest
        round_med[mode][round_of(tag)] = med(slowest)
        for r in ranks:
            for i, s in enumerate(r["step_s"]):
                rows.append([tag, mode, round_of(tag), i, r["rank"], f"{s:.6f}"])
    with open(os.path.join(out, "steps.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "mode", "round", "timed_step", "rank", "seconds"])
        w.writerows(rows)

    meta = open(os.path.join(raw, "meta.txt")).read().strip()
    loads = []
    for p in sorted(glob.glob(os.path.join(raw, "*.load"))):
        la, busy = open(p).read().split()
        loads.append((os.path.basename(p)[:-5], float(la), float(busy)))
    params = next(iter(all_runs.values()))[0]["parameters"]
    ddp = med(mode_steps.get("ddp", []))
    rounds = sorted({r for m in round_med.values() for r in m})
    L = [f"# Training step time: {params / 1e6:.2f}M-parameter MLP, DDP vs gradex", "", meta, "",
         "Load average (1 min) / busy share of all cores just before each run: " +
         ", ".join(f"{t} {la:.1f}/{b:.2f}" for t, la, b in loads) + ".", "",
         "Exposed exchange = the mode's median step - the compute mode's (no exchange): "
         "the time a step waits for its gradients.", "",
         "Per-round ratios: the mode's round median over DDP's in the same round (the "
         "modes of a round ran back to back, so they saw about the same load).", "",
         "| mode | median step ms (slowest rank) | p90 ms | steps | vs DDP | per-round medians ms "
         "| per-round ratios vs DDP | exposed exchange ms | exposed vs DDP's |",
         "|---|---|---|---|---|---|---|---|---|"]
    comp = med(mode_steps.get("compute", []))
    ddp_x = ddp - comp
    for mode in sorted(mode_steps, key=lambda m: (m != "ddp", m)):
        v = sorted(mode_steps[mode])
        p90 = v[min(len(v) - 1, int(0.9 * len(v)))]
        ratio = f"{med(v) / ddp:.3f}" if ddp == ddp else "-"
        per = ", ".join(f"{round_med[mode].get(r, float('nan')) * 1e3:.0f}" for r in rounds)
        x = med(v) - comp
        xs = f"{x * 1e3:.0f}" if x == x and mode != "compute" else "-"
        # A negative exposed time means the load moved more than the exchange weighs.
        xr = f"{x / ddp_x:.3f}" if x > 0 and ddp_x > 0 and mode != "compute" else "-"
        pr = ", ".join(f"{round_med[mode].get(r, float('nan')) / round_med['ddp'][r]:.2f}"
                       for r in rounds if r in round_med.get("ddp", {}))
        L.append(f"| {mode} | {med(v) * 1e3:.0f} | {p90 * 1e3:.0f} | {len(v)} | {ratio} | {per} "
                 f"| {pr or '-'} | {xs} | {xr} |")

    bare = bare_times(raw)
    L += ["", "## gradex: where the step's exchange time goes, and the hook's overhead", "",
          "Per timed step, summed over the step's buckets; medians over steps and rounds. "
          "Hook (last in): per bucket, from the last rank's start of the exchange (selection) "
          "to the last rank's end (reduction), the hook's equivalent of a barrier-started call "
          "timed on the slowest rank; hook (slowest rank): the longest rank's own exchange, "
          "which includes waiting for the others' backward. Bare: gradex-bench's "
          "median call at the same algorithm and sizes. Overhead = (hook - bare) / bare.", "",
          "| mode | buckets (algorithm: elements) | selection ms | communication ms | "
          "reduction ms | hook, last in ms | hook, slowest rank ms | bare ms | "
          "overhead (last in) | overhead (slowest) | stats() sparse_s sum ms |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode in sorted(m for m in mode_steps if m.startswith("gradex:")):
        per_phase = defaultdict(list)
        last_in, slowest, bare_step, layout = [], [], [], ""
        stats_sum = []
        for tag, ranks in all_runs.items():
            if ranks[0]["mode"] != mode:
                continue
            calls = len(ranks[0]["step_s"])
            stats_sum.append(max(sum(b["sparse_s"] or b["last_s"]
                                     for b in last_layouts(r.get("stats", []), calls))
                                 for r in ranks))
            tl = timeline(raw, tag, ranks[0]["first_timed_step"])
            for step, bks in sorted(tl.items()):
                phase = defaultdict(float)
                li = sl = bs = 0.0
                for bi, b in sorted(bks.items()):
                    per_rank = {rk: sum(ph.get(p, 0) for p in PHASES) for rk, ph in b["ranks"].items()}
                    # As gradex-bench's barrier-started call timed on the slowest
                    # rank: from the last rank's start to the last rank's end
                    # (ranks share this machine's clock).
                    li += (max(ph["end"] for ph in b["ranks"].values()) -
                           max(ph["start"] for ph in b["ranks"].values()))
                    sl += max(per_rank.values())
                    for p in PHASES:
                        phase[p] += statistics.mean(ph.get(p, 0) for ph in b["ranks"].values())
                    bs += bare.get((b["algorithm"], b["elements"]), float("nan"))
                layout = ", ".join(f"{b['algorithm']}: {b['elements']}" for _, b in sorted(bks.items()))
                last_in.append(li)
                slowest.append(sl)
                bare_step.append(bs)
                for p in PHASES:
                    per_phase[p].append(phase[p])
        b = med(bare_step)
        L.append(f"| {mode} | {layout} | " +
                 " | ".join(f"{med(per_phase[p]) * 1e3:.0f}" for p in PHASES) +
                 f" | {med(last_in) * 1e3:.0f} | {med(slowest) * 1e3:.0f} | {b * 1e3:.0f} | "
                 f"{(med(last_in) - b) / b * 100:+.1f}% | {(med(slowest) - b) / b * 100:+.1f}% | "
                 f"{med(stats_sum) * 1e3:.0f} |")
    if bare:
        L += ["", "Bare exchange (gradex-bench, median call, median over rounds): " +
              ", ".join(f"{a} {n}: {s * 1e3:.0f} ms" for (a, n), s in sorted(bare.items())) + "."]
    text = "\n".join(L) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--buckets":
        buckets(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 2 and sys.argv[1] not in ("-h", "--help"):
        report(sys.argv[1])
    else:
        print(__doc__)
        sys.exit(0 if len(sys.argv) == 2 else 2)
