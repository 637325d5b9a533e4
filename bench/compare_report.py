#!/usr/bin/env python3
"""Tables and plot of a bench/compare run: OUT/raw/* -> OUT/compare.{csv,md,png}.

gradex-bench runs leave raw/gradex-bw<B>-p<P>-d<D>.jsonl (the JSON lines of the
algorithms that ran) and .txt (its table: phase times, skipped and failed
algorithms); mpi-allreduce-bench leaves raw/mpi-bw<B>-p<P>.jsonl. Dense
algorithms ran at one density per (bandwidth, P); their rows are repeated for
every density with measured_at_density saying where they ran.
"""
import csv
import glob
import json
import os
import re
import sys

FIELDS = ["bandwidth_gbps", "ranks", "density", "algo", "teams", "status", "median_ms", "p90_ms",
          "selection_ms", "communication_ms", "reduction_ms", "sent_mb_per_rank",
          "recv_mb_per_rank", "result_nnz", "consistent", "conservation_max_abs_err",
          "busbw_gbps", "measured_at_density", "load1_before", "cpu_busy_before", "note"]
RAW = re.compile(r"gradex-bw([0-9.]+)-p(\d+)-d([0-9.eE-]+)\.txt$")
MPI = re.compile(r"mpi-bw([0-9.]+)-p(\d+)\.jsonl$")
# A row of gradex-bench's table that ran: name teams median p90 sent recv nnz
# invariants select / comm / reduce busbw.
ROW = re.compile(r"^(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\S+)\s+"
                 r"([\d.]+)\s*/\s*([\d.]+)\s*/\s*([\d.]+)\s+([\d.]+)\s*$")
NOTE = re.compile(r"^(\S+)\s+(\d+)\s+(skipped: .*|FAILED: .*)$")


def ms(x):
    return None if x is None else round(float(x) * 1e3, 3)


def mb(x):
    return None if x is None else round(float(x) / 1e6, 4)


def read_jsonl(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def load_before(path):
    """(1-minute load average, busy share of the cores) just before the run."""
    try:
        with open(path) as f:
            v = [float(x) for x in f.read().split()]
        return (v[0], v[1] if len(v) > 1 else None)
    except (OSError, ValueError, IndexError):
        return (None, None)


def raw_runs(out, pattern, name):
    """(path, name's match) of each OUT/raw/PATTERN file whose name matches, in name order."""
    for path in sorted(glob.glob(os.path.join(out, "raw", pattern))):
        m = name.search(path)
        if m:
            yield path, m


def gradex_rows(out):
    rows = []
    for txt, m in raw_runs(out, "gradex-*.txt", RAW):
        bw, p, d = float(m.group(1)), int(m.group(2)), float(m.group(3))
        by_algo = {j["algo"]: j for j in read_jsonl(txt[:-4] + ".jsonl")}
        load = load_before(txt[:-4] + ".load")
        seen = set()
        with open(txt) as f:
            for line in f:
                r = ROW.match(line.rstrip("\n"))
                n = NOTE.match(line.rstrip("\n")) if not r else None
                if r:
                    algo = r.group(1)
                    j = by_algo.get(algo, {})
                    status = "ok" if r.group(8) == "yes" else "invariant-failure"
                    rows.append(dict(
                        bandwidth_gbps=bw, ranks=p, density=d, algo=algo, teams=int(r.group(2)),
                        status=status, median_ms=ms(j.get("median_s", float(r.group(3)) / 1e3)),
                        p90_ms=ms(j.get("p90_s", float(r.group(4)) / 1e3)),
                        selection_ms=float(r.group(9)), communication_ms=float(r.group(10)),
                        reduction_ms=float(r.group(11)),
                        sent_mb_per_rank=mb(j.get("sent_bytes_per_rank", float(r.group(5)) * 1e6)),
                        recv_mb_per_rank=mb(j.get("recv_bytes_per_rank", float(r.group(6)) * 1e6)),
                        result_nnz=int(r.group(7)), consistent=j.get("consistent"),
                        conservation_max_abs_err=j.get("conservation_max_abs_err"),
                        busbw_gbps=j.get("busbw_gbps", float(r.group(12))),
                        measured_at_density=d, load1_before=load[0],
                        cpu_busy_before=load[1], note=""))
                    seen.add(algo)
                elif n and n.group(1) not in seen:
                    status = "skipped" if n.group(3).startswith("skipped") else "failed"
                    rows.append(dict(bandwidth_gbps=bw, ranks=p, density=d, algo=n.group(1),
                                     teams=int(n.group(2)), status=status, measured_at_density=d,
                                     load1_before=load[0], cpu_busy_before=load[1],
                                     note=n.group(3)))
                    seen.add(n.group(1))
    return rows


def mpi_rows(out):
    rows = []
    for path, m in raw_runs(out, "mpi-*.jsonl", MPI):
        bw, p = float(m.group(1)), int(m.group(2))
        js = read_jsonl(path)
        if not js:
            rows.append(dict(bandwidth_gbps=bw, ranks=p, algo="mpi-allreduce", teams=1,
                             status="failed", note="no result (see raw/mpi-*.txt)"))
            continue
        j = js[-1]
        ok = j["consistent"] and j["conservation_max_abs_err"] <= 1e-4 * p
        rows.append(dict(
            bandwidth_gbps=bw, ranks=p, density=j["density"], algo="mpi-allreduce", teams=1,
            status="ok" if ok else "invariant-failure", median_ms=ms(j["median_s"]),
            p90_ms=ms(j["p90_s"]), selection_ms=0.0, communication_ms=ms(j["communication_s"]),
            reduction_ms=0.0, sent_mb_per_rank=mb(j["sent_bytes_per_rank"]),
            recv_mb_per_rank=mb(j["recv_bytes_per_rank"]), result_nnz=j["result_nnz"],
            consistent=j["consistent"], conservation_max_abs_err=j["conservation_max_abs_err"],
            busbw_gbps=j["busbw_gbps"], measured_at_density=j["density"],
            load1_before=load_before(path[:-6] + ".load")[0],
            cpu_busy_before=load_before(path[:-6] + ".load")[1],
            note="Open MPI 4.1 tuned MPI_Allreduce, pml ob1 + btl tcp; reduction inside the "
                 "call (counted as communication); bytes = link counters incl. TCP/IP headers"))
    return rows


def expand_dense(rows):
    """Dense rows measured at one density, repeated for every density of the grid."""
    dens = sorted({r["density"] for r in rows if r.get("density") is not None and
                   not is_dense(r["algo"])})
    out = [r for r in rows if not is_dense(r["algo"])]
    for r in rows:
        if not is_dense(r["algo"]):
            continue
        for d in dens or [r.get("density")]:
            c = dict(r)
            c["density"] = d
            out.append(c)
    return out


def is_dense(algo):
    return algo.startswith("dense-") or algo == "mpi-allreduce"


def fmt(x):
    if x is None:
        return "-"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def markdown(rows, describe, registry):
    ok = [r for r in rows if r["status"] == "ok"]
    bws = sorted({r["bandwidth_gbps"] for r in rows})
    dens = sorted({r["density"] for r in rows if r.get("density") is not None})
    ps = sorted({r["ranks"] for r in rows})
    algos = list(registry)
    for r in rows:
        if r["algo"] not in algos:
            algos.append(r["algo"])
    order = list(algos)  # registry order within each group: sparse, dense, MPI
    algos.sort(key=lambda a: (a == "mpi-allreduce", a.startswith("dense-"), order.index(a)))
    algos = [a for a in algos if any(r["algo"] == a for r in rows)]
    get = {(r["bandwidth_gbps"], r["density"], r["ranks"], r["algo"]): r for r in rows}
    L = ["# Side-by-side comparison on an emulated cloud network", ""]
    if describe:
        L += [describe, ""]
    busy = [r["cpu_busy_before"] for r in rows if r.get("cpu_busy_before") is not None]
    loads = [r["load1_before"] for r in rows if r.get("load1_before") is not None]
    if busy:
        L += [f"Other work on the machine just before the runs: {100 * min(busy):.0f}% to "
              f"{100 * max(busy):.0f}% of the cores busy (1-minute load average "
              f"{min(loads):.1f} to {max(loads):.1f}; per run in compare.csv). Such work slows "
              "selection and reduction most.", ""]
    L += ["Median time per call in ms (the slowest rank's, over the timed calls); **bold**: "
          "fastest in its column. `-`: not run; `skip`/`FAIL`: see compare.csv. Dense rows "
          "(dense-*, mpi-allreduce) do not depend on the density and were measured once per "
          "(bandwidth, P).", ""]
    L.append("| Gbit/s | density | algorithm | " + " | ".join(f"P={p}" for p in ps) + " |")
    L.append("|---|---|---|" + "---|" * len(ps))
    for bw in bws:
        for d in dens:
            best = {}
            for p in ps:
                c = [r["median_ms"] for r in ok if r["bandwidth_gbps"] == bw and
                     r["density"] == d and r["ranks"] == p]
                best[p] = min(c) if c else None
            for a in algos:
                cells = []
                for p in ps:
                    r = get.get((bw, d, p, a))
                    if r is None:
                        cells.append("-")
                    elif r["status"] == "skipped":
                        cells.append("skip")
                    elif r["status"] != "ok":
                        cells.append("FAIL")
                    else:
                        s = fmt(r["median_ms"])
                        cells.append(f"**{s}**" if r["median_ms"] == best[p] else s)
                if any(c != "-" for c in cells):
                    L.append(f"| {bw:g} | {d:g} | {a} | " + " | ".join(cells) + " |")
    L += ["", "## Winners", "",
          "Fastest algorithm per cell, and how much faster it is than Open MPI's MPI_Allreduce, "
          "than gradex's own dense-ring (both dense baselines, from the same run) and than the "
          "fastest other sparse algorithm.", "",
          "| Gbit/s | density | P | fastest | ms | vs mpi-allreduce | vs dense-ring | "
          "runner-up (sparse) | margin |", "|---|---|---|---|---|---|---|---|---|"]
    for bw in bws:
        for d in dens:
            for p in ps:
                c = sorted((r for r in ok if r["bandwidth_gbps"] == bw and r["density"] == d and
                            r["ranks"] == p), key=lambda r: r["median_ms"])
                if not c:
                    continue
                w = c[0]
                mpi = get.get((bw, d, p, "mpi-allreduce"))
                vs = (f"{mpi['median_ms'] / w['median_ms']:.1f}x" if mpi and
                      mpi["status"] == "ok" and w["algo"] != "mpi-allreduce" else "-")
                ring = get.get((bw, d, p, "dense-ring"))
                vs_ring = (f"{ring['median_ms'] / w['median_ms']:.1f}x" if ring and
                           ring["status"] == "ok" and w["algo"] != "dense-ring" else "-")
                sp = [r for r in c[1:] if not is_dense(r["algo"])]
                ru = f"{sp[0]['algo']} ({fmt(sp[0]['median_ms'])})" if sp else "-"
                mg = f"{sp[0]['median_ms'] / w['median_ms']:.2f}x" if sp else "-"
                L.append(f"| {bw:g} | {d:g} | {p} | {w['algo']} | {fmt(w['median_ms'])} | {vs} | "
                         f"{vs_ring} | {ru} | {mg} |")
    pp = max([p for p in ps if p <= 4] or ps)
    L += ["", f"## Where the time goes (P={pp})", "",
          "Per call, ms: selection / communication / reduction (gradex-bench's phase timers, "
          "each rank's median averaged over ranks; communication includes waiting for slower "
          "ranks), and MB sent per rank. For mpi-allreduce the whole call is communication "
          "(Open MPI reduces inside it).", "",
          "| Gbit/s | density | algorithm | total | select | comm | reduce | MB sent |",
          "|---|---|---|---|---|---|---|---|"]
    for bw in bws:
        for d in dens:
            for a in algos:
                r = get.get((bw, d, pp, a))
                if r is None or r["status"] != "ok":
                    continue
                L.append(f"| {bw:g} | {d:g} | {a} | {fmt(r['median_ms'])} | "
                         f"{fmt(r['selection_ms'])} | {fmt(r['communication_ms'])} | "
                         f"{fmt(r['reduction_ms'])} | {fmt(r['sent_mb_per_rank'])} |")
    bad = [r for r in rows if r["status"] in ("failed", "invariant-failure")]
    if bad:
        L += ["", "## Failures", ""]
        for r in bad:
            L.append(f"- {r['bandwidth_gbps']:g} Gbit/s P={r['ranks']} density "
                     f"{r.get('density')}: {r['algo']}: {r['status']} {r.get('note', '')}")
    return "\n".join(L) + "\n"


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("compare_report: matplotlib missing, no PNG", file=sys.stderr)
        return
    ok = [r for r in rows if r["status"] == "ok"]
    bws = sorted({r["bandwidth_gbps"] for r in ok})
    dens = sorted({r["density"] for r in ok})
    if not bws or not dens:
        return
    algos = sorted({r["algo"] for r in ok}, key=lambda a: (is_dense(a), a))
    fig, axes = plt.subplots(len(bws), len(dens), figsize=(4.2 * len(dens), 3.6 * len(bws)),
                             squeeze=False, sharex=True)
    # Distinct colour and marker per algorithm; MPI, the anchor, in black.
    colors = list(plt.get_cmap("tab10").colors) + list(plt.get_cmap("Dark2").colors)
    markers = "os^vD<>pP*Xh"
    ps = sorted({r["ranks"] for r in ok})
    for i, bw in enumerate(bws):
        for j, d in enumerate(dens):
            ax = axes[i][j]
            for k, a in enumerate(algos):
                pts = sorted((r["ranks"], r["median_ms"]) for r in ok if r["algo"] == a and
                             r["bandwidth_gbps"] == bw and r["density"] == d)
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker=markers[k % 12],
                            markersize=4, linestyle="--" if is_dense(a) else "-", linewidth=1.2,
                            color="black" if a == "mpi-allreduce" else colors[k % len(colors)],
                            label=a)
            ax.set_yscale("log")
            ax.set_xticks(ps)
            ax.set_title(f"{bw:g} Gbit/s, density {d:g}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(bws) - 1:
                ax.set_xlabel("P (ranks)")
            if j == 0:
                ax.set_ylabel("ms per call (median)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes:
        for ax in row:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in labels:
                    handles.append(h)
                    labels.append(l)
    rows_of_legend = (len(labels) + 5) // 6
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, (0.35 + 0.25 * rows_of_legend) / fig.get_figheight(), 1, 1))
    fig.savefig(path, dpi=110)


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    describe = ""
    meta = os.path.join(out, "meta.txt")
    if os.path.exists(meta):
        with open(meta) as f:
            describe = f.read().strip()
    rows = expand_dense(gradex_rows(out) + mpi_rows(out))
    rows.sort(key=lambda r: (r["bandwidth_gbps"], r.get("density") or 0, r["ranks"],
                             is_dense(r["algo"]), r["algo"]))
    with open(os.path.join(out, "compare.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    registry = []  # gradex-bench's order, written by bench/compare
    names = os.path.join(out, "algos.txt")
    if os.path.exists(names):
        with open(names) as f:
            registry = [a for a in f.read().strip().split(",") if a]
    md = markdown(rows, describe, registry)
    with open(os.path.join(out, "compare.md"), "w") as f:
        f.write(md)
    plot(rows, os.path.join(out, "compare.png"))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
