"""The dashboards against a live Prometheus (live_check.py, and
ps_live_check.py for the parameter-server board): every panel's query returns
data at the stall or near the end of the run, and, with
LIVE_SAVE_SERIES=FILE, every panel's series over the run for
scripts/plot-dashboards."""
import json
import os
import re
import urllib.parse
import urllib.request


PS_BOARD = "gradex-ps-servers.json"


def save_series(pport, chart, subst, t0, t1, path):
    """Every panel's queries over the run (range queries, 2 s steps)."""
    out = {}
    for fn in sorted(os.listdir(f"{chart}/dashboards")):
        d = json.load(open(f"{chart}/dashboards/{fn}"))
        panels = []
        for p in d["panels"]:
            series = []
            for t in p["targets"]:
                q = t["expr"]
                for k, v in subst.items():
                    q = q.replace(k, v)
                url = f"http://127.0.0.1:{pport}/api/v1/query_range?" + urllib.parse.urlencode(
                    {"query": q, "start": f"{t0:.0f}", "end": f"{t1:.0f}", "step": "2"})
                with urllib.request.urlopen(url, timeout=30) as r:
                    res = json.load(r)["data"]["result"]
                for r in res:
                    legend = re.sub(r"\{\{ *(\w+) *\}\}", lambda m: r["metric"].get(m.group(1), ""),
                                    t["legendFormat"])
                    series.append({"legend": legend, "labels": r["metric"], "t": [float(v[0]) - t0 for v in r["values"]],
                                   "v": [float(v[1]) for v in r["values"]]})
            panels.append({"title": p["title"], "type": p["type"], "unit": p["fieldConfig"]["defaults"].get("unit", ""),
                           "stack": p["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode") == "normal",
                           "gridPos": p["gridPos"], "repeat": p.get("repeat"), "series": series})
        out[fn] = {"title": d["title"], "panels": panels}
    json.dump(out, open(path, "w"))


def check(prom, fail, chart, work, jobid, algorithm, times, pport):
    """prom(query, at) -> result list; fail(msg) exits; times = (start, stall, end)."""
    t_start, t_stall, t_end = times
    subst = {"$job": jobid, "$rank": ".*", "$__rate_interval": "15s", "$__range": "10m",
             "${datasource}": ""}
    # A panel passes when one of its queries does; a query that needs
    # auto_teams (the link probe, off here so that B-SAG runs: with
    # auto_teams 4 ranks get R-SAG), one of Ok-Topk's call details (the job
    # runs B-SAG; tests/collectives checks them) or one that draws only
    # non-zero values ("> 0") may be empty and is listed.
    panels, queries, empty_panels, empty_queries, nonzero_only = 0, 0, [], [], set()
    results = {}
    for fn in sorted(os.listdir(f"{chart}/dashboards")):
        # The parameter-server board is a dgs job's (ps_live_check.py), the
        # others a collective job's (live_check.py).
        if (fn == PS_BOARD) != (algorithm == "dgs"):
            print(f"dashboards: {fn} not checked ({'a collective' if algorithm != 'dgs' else 'a parameter-server'} job)")
            continue
        d = json.load(open(f"{chart}/dashboards/{fn}"))
        for p in d["panels"]:
            panels += 1
            any_data = False
            for t in p["targets"]:
                q = t["expr"]
                for k, v in subst.items():
                    q = q.replace(k, v)
                queries += 1
                got = prom(q, t_end) or prom(q, t_stall)
                results[f"{fn}: {p['title']} [{t['refId']}]"] = {"expr": q, "series": len(got)}
                any_data = any_data or bool(got)
                if not got:
                    empty_queries.append(f"{fn}: {p['title']} [{t['legendFormat']}]")
                    if t["expr"].rstrip().endswith("> 0"):
                        nonzero_only.add(empty_queries[-1])
            if not any_data:
                empty_panels.append(f"{fn}: {p['title']}")
    json.dump({"prometheus_port": pport, "t_stall": t_stall, "t_end": t_end, "panels": results},
              open(f"{work}/panels.json", "w"), indent=1)
    if os.environ.get("LIVE_SAVE_SERIES"):  # for scripts/plot-dashboards
        save_series(pport, chart, subst, t_start, t_end, os.environ["LIVE_SAVE_SERIES"])
    if empty_panels:
        fail(f"{len(empty_panels)} of {panels} panels show no data:\n  " + "\n  ".join(empty_panels))
    print(f"dashboards: all {panels} panels show data ({queries - len(empty_queries)} of {queries} queries)")
    for q in empty_queries:
        if "auto_teams" in q:
            print(f"  no data (expected without auto_teams): {q}")
        elif "Ok-Topk" in q and algorithm != "oktopk":
            print(f"  no data (Ok-Topk's call details; this job runs another algorithm): {q}")
        elif q in nonzero_only:
            print(f"  no data (drawn only when non-zero): {q}")
        else:
            fail(f"query without data: {q}")
