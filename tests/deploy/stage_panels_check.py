#!/usr/bin/env python3
"""The network dashboard's hierarchical-exchange panels compute what they say,
on made-up series through promtool's PromQL unit tests: two ranks (rank 1 at
twice rank 0's stage time), one call a second each, 2 nodes: time per call by
rank and stage, bytes/s by stage and direction, the inter-node bytes leaving
each node, and the layout stat; with the layout gauges at 0 (flat) the
per-node series is not drawn.
usage: stage_panels_check.py DASHBOARD_JSON WORK_DIR"""
import json
import os
import subprocess
import sys

BOARD, WORK = sys.argv[1], sys.argv[2]
L = 'gradex_job="j"'


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def exprs(title_start):
    for p in json.load(open(BOARD))["panels"]:
        if p["title"].startswith(title_start):
            return [t["expr"].replace("$job", "j").replace("$rank", ".*")
                    .replace("$__rate_interval", "1m") for t in p["targets"]]
    fail(f"{os.path.basename(BOARD)}: no panel titled {title_start!r}...")


def counter(name, labels, per_minute):
    return {"series": f"{name}{{{L},{labels}}}", "values": f"0+{per_minute}x10"}


def series(nodes):
    out = []
    for rank, k in (("0", 1), ("1", 2)):
        out.append(counter("gradex_agent_stage_seconds_total", f'rank="{rank}",stage="intra_node"', 6 * k))
        out.append(counter("gradex_agent_stage_seconds_total", f'rank="{rank}",stage="inter_node"', 12 * k))
        for phase in ("total", "selection"):
            out.append(counter("gradex_agent_call_duration_seconds_count",
                               f'rank="{rank}",phase="{phase}",algorithm="spardl"', 60))
        for stage, per in (("intra_node", 1), ("inter_node", 3)):
            for direction, b in (("sent", 600), ("received", 1200)):
                out.append(counter("gradex_agent_stage_bytes_total",
                                   f'rank="{rank}",stage="{stage}",direction="{direction}"', b * per))
        out.append({"series": f'gradex_agent_hierarchy_nodes{{{L},rank="{rank}"}}', "values": f"{nodes}x10"})
        out.append({"series": f'gradex_agent_hierarchy_ranks_per_node{{{L},rank="{rank}"}}',
                    "values": f"{1 if nodes else 0}x10"})
    return out


def main():
    layout = exprs("Node layout")
    time = exprs("Time per call in each stage")
    nbytes = exprs("Bytes/s in each stage")
    if len(layout) != 2 or len(time) != 1 or len(nbytes) != 2:
        fail("the stage panels' queries changed: update this check")
    t = "5m"
    hier = [
        {"expr": layout[0], "eval_time": t, "exp_samples": [{"labels": "{}", "value": 2}]},
        {"expr": layout[1], "eval_time": t, "exp_samples": [{"labels": "{}", "value": 1}]},
        {"expr": time[0], "eval_time": t, "exp_samples": [
            {"labels": '{rank="0",stage="intra_node"}', "value": 0.1},
            {"labels": '{rank="0",stage="inter_node"}', "value": 0.2},
            {"labels": '{rank="1",stage="intra_node"}', "value": 0.2},
            {"labels": '{rank="1",stage="inter_node"}', "value": 0.4}]},
        {"expr": nbytes[0], "eval_time": t, "exp_samples": [
            {"labels": '{stage="intra_node",direction="sent"}', "value": 20},
            {"labels": '{stage="intra_node",direction="received"}', "value": 40},
            {"labels": '{stage="inter_node",direction="sent"}', "value": 60},
            {"labels": '{stage="inter_node",direction="received"}', "value": 120}]},
        # Both ranks' inter-node bytes (2 x 30 B/s) over 2 nodes.
        {"expr": nbytes[1], "eval_time": t, "exp_samples": [{"labels": "{}", "value": 30}]},
    ]
    flat = [
        {"expr": layout[0], "eval_time": t, "exp_samples": [{"labels": "{}", "value": 0}]},
        {"expr": nbytes[1], "eval_time": t, "exp_samples": []},
    ]
    tests = {"rule_files": [], "evaluation_interval": "1m", "tests": [
        {"name": "hierarchical", "interval": "1m", "input_series": series(2), "promql_expr_test": hier},
        {"name": "flat", "interval": "1m", "input_series": series(0), "promql_expr_test": flat}]}
    os.makedirs(WORK, exist_ok=True)
    path = os.path.join(WORK, "stage_panels_test.yaml")
    with open(path, "w") as f:
        json.dump(tests, f, indent=1)
    r = subprocess.run(["promtool", "test", "rules", path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(r.stdout + r.stderr, file=sys.stderr)
        fail(f"the network dashboard's stage panels ({path})")
    print("PASS stage panels: time per call by stage, bytes by stage and direction, per node, layout")


if __name__ == "__main__":
    main()
