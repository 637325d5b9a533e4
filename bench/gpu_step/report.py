"""Tables of bench/gpu_step/run.sh: OUT/summary.md (printed too) and
OUT/summary.json from the rank results and timelines in OUT/raw.

  report.py OUT

Per (loopback rate, mode):
  - median step ms: of the slowest rank's step times (forward + backward +
    optimizer step, ended by torch.cuda.synchronize() on a GPU), over every
    timed step of every round; p90 likewise;
  - vs DDP: each round's median over DDP's median at the same rate in the
    same round (they ran back to back), then the median over rounds;
  - PCIe bytes per step, each way: stats()'s device_to_host_bytes and
    host_to_device_bytes summed over the buckets of the last layout (a
    step's buckets), rank 0; with the device path(s) stats() reports;
  - phase split: GRADEX_TIMELINE's selection (staging and the local part),
    communication and reduction, mean over ranks, summed over a step's
    buckets, median over steps; and the largest bucket's own selection.
The timeline and stats() readers are bench/train_step/report.py's.
"""
import importlib.util
import json
import os
import statistics
import sys
from collections import defaultdict

_spec = importlib.util.spec_from_file_location(
    "train_step_report",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_step", "report.py"))
ts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ts)

PHASES = ts.PHASES
med = ts.med


def rate_of(tag):
    return tag.split("-", 1)[0]


def rate_bits(rate):
    """Bits per second of a rate name (unlimited: infinite), to sort fastest first."""
    if rate == "unlimited":
        return float("inf")
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    return 0.0


def pcie(ranks):
    """(device_to_host, host_to_device) bytes per step and the device paths, rank 0's."""
    r0 = min(ranks, key=lambda r: r["rank"])
    layout = ts.last_layouts(r0.get("stats", []), len(r0["step_s"]))
    if not layout or "device_to_host_bytes" not in layout[0]:
        return None, None, []  # DDP, or a gradex without these stats
    return (sum(b["device_to_host_bytes"] for b in layout),
            sum(b["host_to_device_bytes"] for b in layout),
            sorted({b["device_path"] for b in layout}))


def phases(raw, tag, first_step):
    """Per timed step: {phase: s} summed over buckets (mean over ranks), and
    the largest bucket's (elements, selection s)."""
    per_step, largest = [], []
    for step, bks in sorted(ts.timeline(raw, tag, first_step).items()):
        total = defaultdict(float)
        big = max(bks.values(), key=lambda b: b["elements"])
        for b in bks.values():
            for p in PHASES:
                total[p] += statistics.mean(ph.get(p, 0) for ph in b["ranks"].values())
        per_step.append(total)
        largest.append((big["elements"], statistics.mean(
            ph.get("selection", 0) for ph in big["ranks"].values())))
    return per_step, largest


def report(out):
    raw = os.path.join(out, "raw")
    all_runs = ts.runs(raw)
    if not all_runs:
        sys.exit(f"report: no finished runs in {raw} (see its *.log)")
    meta_path = os.path.join(raw, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    steps = defaultdict(list)                     # (rate, mode) -> slowest-rank step times
    round_med = defaultdict(dict)                 # (rate, mode) -> {round: median}
    extra = defaultdict(lambda: defaultdict(list))
    for tag, ranks in sorted(all_runs.items()):
        world = ranks[0]["world_size"]
        if len(ranks) < world:
            print(f"report: {tag} has {len(ranks)} of {world} ranks; skipped")
            continue
        key = (rate_of(tag), ranks[0]["mode"])
        n = min(len(r["step_s"]) for r in ranks)
        slowest = [max(r["step_s"][i] for r in ranks) for i in range(n)]
        steps[key] += slowest
        round_med[key][ts.round_of(tag)] = med(slowest)
        e = extra[key]
        e["parameters"].append(ranks[0]["parameters"])
        e["device"].append(ranks[0].get("device", "cpu"))
        if ranks[0]["mode"].startswith("gradex:"):
            d2h, h2d, paths = pcie(ranks)
            e["d2h"].append(d2h)
            e["h2d"].append(h2d)
            e["paths"] += paths
            r0 = min(ranks, key=lambda r: r["rank"])
            layout = ts.last_layouts(r0.get("stats", []), len(r0["step_s"]))
            e["algorithms"] += [f"{b['algorithm']}:{b['elements']}" for b in layout]
            per_step, largest = phases(raw, tag, ranks[0]["first_timed_step"])
            for p in PHASES:
                e[p] += [s[p] for s in per_step]
            e["largest"] += largest

    results = []
    for (rate, mode) in sorted(steps, key=lambda k: (-rate_bits(k[0]), k[1] != "ddp", k[1])):
        v = sorted(steps[(rate, mode)])
        e = extra[(rate, mode)]
        ddp = round_med.get((rate, "ddp"), {})
        ratios = [m / ddp[r] for r, m in sorted(round_med[(rate, mode)].items()) if r in ddp]
        row = {"rate": rate, "mode": mode, "device": e["device"][0],
               "parameters": e["parameters"][0], "steps": len(v),
               "median_step_ms": med(v) * 1e3,
               "p90_step_ms": v[min(len(v) - 1, int(0.9 * len(v)))] * 1e3,
               "vs_ddp": med(ratios) if ratios else None, "vs_ddp_per_round": ratios}
        if mode.startswith("gradex:"):
            d2h = [x for x in e["d2h"] if x is not None]
            h2d = [x for x in e["h2d"] if x is not None]
            row["pcie_bytes_per_step"] = {"device_to_host": med(d2h) if d2h else None,
                                          "host_to_device": med(h2d) if h2d else None}
            row["device_paths"] = sorted(set(e["paths"]))
            row["buckets"] = sorted(set(e["algorithms"]))
            row["phases_ms_per_step"] = {p: med(e[p]) * 1e3 if e[p] else None for p in PHASES}
            if e["largest"]:
                row["largest_bucket"] = {"elements": e["largest"][0][0],
                                         "selection_ms": med([s for _, s in e["largest"]]) * 1e3}
        results.append(row)

    def f(x, fmt="{:.0f}"):
        return "-" if x is None or x != x else fmt.format(x)

    def mb(x):
        return "-" if x is None else f"{x / 1e6:.1f}"

    params = results[0]["parameters"]
    L = [f"# GPU step time: {params / 1e6:.1f}M-parameter MLP, {meta.get('ranks', '?')} ranks "
         f"on one {results[0]['device']} device, DDP (gloo) vs gradex", "",
         f"{meta.get('gpu', '-')} (driver {meta.get('driver', '-')}, CUDA "
         f"{meta.get('cuda', '-')}); torch {meta.get('torch', '-')}; batch "
         f"{meta.get('batch', '?')}, {meta.get('warmup', '?')} warm-up + {meta.get('steps', '?')} "
         f"timed steps, {meta.get('rounds', '?')} round(s); density {meta.get('density', '?')}; "
         f"gradex UCX_TLS={meta.get('ucx_tls', '-')}, from {meta.get('gradex_from', '-')}; "
         f"source {meta.get('source', '?')}; {meta.get('date', '')}.", "",
         "Rates: loopback unlimited, or limited by tc tbf (one link shared by all ranks). "
         "vs DDP: the mode's median step over DDP's at the same rate, same round. PCIe: "
         "stats()'s copies per step, each way. Phases: GRADEX_TIMELINE per step, summed over "
         "buckets, mean over ranks (selection includes staging the bucket to the host).", "",
         "| rate | mode | median step ms | p90 ms | steps | vs DDP | PCIe MB/step d2h | h2d "
         "| device path | selection ms | communication ms | reduction ms | largest bucket: "
         "selection ms |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        pc = r.get("pcie_bytes_per_step", {})
        ph = r.get("phases_ms_per_step", {})
        lb = r.get("largest_bucket")
        L.append(f"| {r['rate']} | {r['mode']} | {f(r['median_step_ms'])} | "
                 f"{f(r['p90_step_ms'])} | {r['steps']} | {f(r['vs_ddp'], '{:.2f}')} | "
                 f"{mb(pc.get('device_to_host'))} | {mb(pc.get('host_to_device'))} | "
                 f"{', '.join(r.get('device_paths', [])) or '-'} | "
                 + " | ".join(f(ph.get(p), '{:.1f}') for p in PHASES) + " | "
                 + (f"{lb['elements']}: {lb['selection_ms']:.1f}" if lb else "-") + " |")
    layouts = {r["mode"]: r["buckets"] for r in results if r.get("buckets")}
    if layouts:
        L += ["", "Buckets (algorithm:elements, last layout): " +
              "; ".join(f"{m}: {', '.join(b)}" for m, b in sorted(layouts.items())) + "."]
    text = "\n".join(L) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"meta": meta, "results": results}, fh, indent=1)
    print(text)


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] not in ("-h", "--help"):
        report(sys.argv[1])
    else:
        print(__doc__)
        sys.exit(0 if len(sys.argv) == 2 else 2)
