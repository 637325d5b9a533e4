#!/usr/bin/python3
"""Sweep gradex-sim over P and write CSV, markdown and a PNG plot.

usage: bench/sim_sweep.py [--sim build/bin/gradex-sim] [--out results/sim]
                          [--ranks 2,3,4,...] [--elements 25000000] [--density 0.01]
                          [--alpha 20e-6] [--beta 3.2e-10] [--mem-gib 4] [--timeout 1800]
                          [--add-rows ROWS.json --add-mem-gib G]

Every P runs `gradex-sim --algo all --json`; rows past the memory budget are
run at N/2^j and N/2^(j+1) and extrapolated to N (column `extrapolated`);
where that extrapolation is refused, gradex-sim reports alpha*L + beta*B from
its parts (column `decomposed`). A row that does not fit the budget at any N
is skipped; --add-rows merges gradex-sim --json rows run separately with a
larger budget (--add-mem-gib, kept per row in column `mem_gib`).
Needs Debian's python3-matplotlib (installed with apt-get when missing).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

DEFAULT_RANKS = "2,3,4,6,8,12,16,32,48,64,128,256,512,1024"
FIELDS = ["algo", "ranks", "teams", "elements", "density", "alpha", "beta", "n_run", "n_second",
          "extrapolated", "decomposed", "time_s", "time_lo_s", "model_lo_s", "model_hi_s", "sent_bytes_max",
          "recv_bytes_max", "messages_max", "result_nnz", "consistent", "conserved",
          "peak_rss_bytes", "mem_gib", "wall_s", "skipped", "error", "note"]


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        subprocess.run(["apt-get", "install", "-y", "python3-matplotlib"], check=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def run_p(args, p):
    cmd = [args.sim, "--algo", "all", "--ranks", str(p), "--elements", str(args.elements),
           "--density", str(args.density), "--alpha", str(args.alpha), "--beta", str(args.beta),
           "--mem-gib", str(args.mem_gib), "--json"]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    wall = time.time() - start
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in rows:
        r["wall_s"] = round(wall / max(len(rows), 1), 1)
        r["mem_gib"] = args.mem_gib
    if not rows:
        sys.stderr.write(f"P={p}: no output (rc {proc.returncode}): {proc.stderr[-2000:]}\n")
    return rows


def write_markdown(path, rows, args):
    algos = []
    for r in rows:
        if r["algo"] not in algos:
            algos.append(r["algo"])
    ranks = sorted({r["ranks"] for r in rows})
    by = {(r["algo"], r["ranks"]): r for r in rows}
    with open(path, "w") as f:
        f.write(f"# gradex-sim: modeled time per call (ms), N = {args.elements}, density "
                f"{args.density}, α = {args.alpha * 1e6:g} µs, β = {args.beta:g} s/B "
                f"({8e-9 / args.beta:g} Gbit/s)\n\n")
        f.write("Unmarked: run at N. `*`: run at a smaller N and extrapolated to N (see "
                "docs/architecture.md, Simulator). `~`: modeled as α·L + β·B from the critical "
                "path's messages and (extrapolated) bytes, the time's own extrapolation being "
                "refused; its lower end max(α·L, β·B) is in the notes. `!`: an invariant "
                "(consistency or conservation) failed. `-`: skipped or failed.\n\n")
        f.write("| algorithm | " + " | ".join(f"P={p}" for p in ranks) + " |\n")
        f.write("|---|" + "---:|" * len(ranks) + "\n")
        notes = []
        for a in algos:
            cells = []
            for p in ranks:
                r = by.get((a, p))
                if r is not None and r.get("error"):
                    cells.append("†")
                    notes.append(f"† {a}, P={p}: {r['error']}")
                    continue
                if r is None or "time_s" not in r:
                    cells.append("-")
                    continue
                mark = "*" if r.get("extrapolated") else ""
                if r.get("decomposed"):
                    mark += "~"
                    notes.append(f"~ {a}, P={p}: α·L + β·B, at least "
                                 f"{float(r['time_lo_s']) * 1e3:.2f} ms, "
                                 + (r.get("note") or f"from N={r['n_run']} and {r['n_second']}")
                                 + f"; run with --mem-gib {r.get('mem_gib')}")
                if not (r.get("consistent") and r.get("conserved")):
                    mark += "!"
                cells.append(f"{r['time_s'] * 1e3:.2f}{mark}")
            f.write(f"| {a} | " + " | ".join(cells) + " |\n")
        for note in notes:
            f.write(f"\n{note}\n")
        f.write("\nBytes sent per rank (max over ranks, MB):\n\n")
        f.write("| algorithm | " + " | ".join(f"P={p}" for p in ranks) + " |\n")
        f.write("|---|" + "---:|" * len(ranks) + "\n")
        for a in algos:
            cells = []
            for p in ranks:
                r = by.get((a, p))
                cells.append("-" if r is None or r.get("error") or "time_s" not in r
                             else f"{r['sent_bytes_max'] / 1e6:.2f}")
            f.write(f"| {a} | " + " | ".join(cells) + " |\n")
        skips = sorted({(r["algo"], r["ranks"], r["skipped"]) for r in rows
                        if r.get("skipped") and (r["algo"], r["ranks"]) not in
                        {(x["algo"], x["ranks"]) for x in rows if "time_s" in x}})
        for a, p, why in skips:
            f.write(f"\nSkipped {a}, P={p}: {why}\n")
        own = [r for r in rows if float(r.get("mem_gib") or args.mem_gib) == args.mem_gib]
        peak = max((r.get("peak_rss_bytes", 0) for r in own), default=0)
        f.write(f"\nPeak RSS of one gradex-sim run: {peak / 2**30:.2f} GiB "
                f"(budget {args.mem_gib} GiB).\n")
        for r in rows:
            if r not in own:
                f.write(f"{r['algo']}, P={r['ranks']}: run separately with --mem-gib "
                        f"{r['mem_gib']}, peak RSS {r['peak_rss_bytes'] / 2**30:.2f} GiB.\n")


def plot(path, rows, args, plt):
    fig, ax = plt.subplots(figsize=(10, 6.5))
    algos = []
    for r in rows:
        if r["algo"] not in algos:
            algos.append(r["algo"])
    markers = "os^vD<>phx*+1234"
    for i, a in enumerate(algos):
        pts = sorted((r["ranks"], r["time_s"] * 1e3) for r in rows
                     if r["algo"] == a and "time_s" in r and not r.get("error"))
        if not pts:
            continue
        style = "--" if a.startswith("dense") else "-"
        ax.plot([p for p, _ in pts], [t for _, t in pts], style, marker=markers[i % len(markers)],
                markersize=4, label=a, color=plt.cm.tab20(i % 20))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks P")
    ax.set_ylabel("modeled time per call (ms)")
    ax.set_title(f"gradex-sim: N={args.elements / 1e6:g}M, density {args.density}, "
                 f"α={args.alpha * 1e6:g} µs, {8e-9 / args.beta:g} Gbit/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim", default="build/bin/gradex-sim")
    ap.add_argument("--out", default="results/sim")
    ap.add_argument("--ranks", default=DEFAULT_RANKS)
    ap.add_argument("--elements", type=int, default=25_000_000)
    ap.add_argument("--density", type=float, default=0.01)
    ap.add_argument("--alpha", type=float, default=20e-6)
    ap.add_argument("--beta", type=float, default=8 / 25e9)
    ap.add_argument("--mem-gib", type=float, default=4)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--add-rows", help="gradex-sim --json output to merge (replaces algo, P)")
    ap.add_argument("--add-mem-gib", type=float, help="the --mem-gib those rows ran with")
    args = ap.parse_args()
    plt = ensure_matplotlib()
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "sim.csv")
    rows = []
    if os.path.exists(csv_path):  # resumable: keep the P already done
        with open(csv_path) as f:
            for r in csv.DictReader(f):
                if r["time_s"] or r["error"] or r.get("skipped"):
                    for k in ("ranks", "teams", "elements", "n_run", "n_second",
                              "sent_bytes_max", "recv_bytes_max", "messages_max",
                              "result_nnz", "peak_rss_bytes"):
                        r[k] = int(float(r[k] or 0))
                    for k in ("time_s", "model_lo_s", "model_hi_s", "time_lo_s"):
                        r[k] = float(r[k]) if r.get(k) else float("nan")
                    if r["error"] or r.get("skipped"):
                        del r["time_s"]
                    for k in ("extrapolated", "decomposed", "consistent", "conserved"):
                        r[k] = r.get(k) == "True"
                    r["mem_gib"] = float(r.get("mem_gib") or args.mem_gib)
                    rows.append(r)
    if args.add_rows:
        with open(args.add_rows) as f:
            extra = [json.loads(line) for line in f if line.startswith("{")]
        for e in extra:
            e["mem_gib"] = args.add_mem_gib
            e["wall_s"] = ""
        keys = {(e["algo"], e["ranks"]) for e in extra}
        rows = [r for r in rows if (r["algo"], r["ranks"]) not in keys] + extra
        rows.sort(key=lambda r: r["ranks"])  # stable: algorithm order kept within P
    done = {r["ranks"] for r in rows}
    def save():
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow(r)
    if args.add_rows:
        save()
    for p in [int(x) for x in args.ranks.split(",")]:
        if p in done:
            continue
        sys.stderr.write(f"P={p} ...\n")
        rows.extend(run_p(args, p))
        save()
    write_markdown(os.path.join(args.out, "sim.md"), rows, args)
    plot(os.path.join(args.out, "sim.png"), rows, args, plt)
    print(open(os.path.join(args.out, "sim.md")).read())


if __name__ == "__main__":
    main()
