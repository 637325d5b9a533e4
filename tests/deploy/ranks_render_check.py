#!/usr/bin/env python3
"""Ranks per pod and GPU pods, on chart_test.sh's renders: every local rank
has a named metrics port (gx-metrics-<l> = metricsPort + l), the PodMonitor
scrapes each of them (an endpoint per port name the pod declares) and labels
each series with its local rank and rank, the NetworkPolicy admits the whole
metrics range, and a gpusPerPod pod requests its GPUs, runs one rank per GPU
and carries the GPU tolerations and node selector.
usage: ranks_render_check.py RENDERS_DIR"""
import sys

import yaml

RENDERS = sys.argv[1]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def load(name):
    return [d for d in yaml.safe_load_all(open(f"{RENDERS}/{name}.yaml")) if d]


def check(name, nproc, gpus):
    docs = load(name)
    job = [d for d in docs if d["kind"] == "Job"][0]
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    base = int(env["GRADEX_METRICS_PORT"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    want = {f"gx-metrics-{l}": base + l for l in range(nproc)}
    if {k: v for k, v in ports.items() if k.startswith("gx-metrics-")} != want:
        fail(f"{name}: metrics ports {ports}, expected {want}")
    if env["NPROC_PER_NODE"] != str(nproc):
        fail(f"{name}: NPROC_PER_NODE {env['NPROC_PER_NODE']}, expected {nproc}")
    pms = [d for d in docs if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-trainers")]
    if pms:
        eps = pms[0]["spec"]["podMetricsEndpoints"]
        if [e["port"] for e in eps] != list(want):
            fail(f"{name}: the PodMonitor scrapes {[e['port'] for e in eps]}, the pod serves {list(want)}")
        for l, e in enumerate(eps):
            rl = {r["targetLabel"]: r for r in e["relabelings"]}
            if rl["local_rank"].get("replacement") != str(l):
                fail(f"{name}: endpoint {l} does not label local_rank {l}")
            ranks = [r for r in e["relabelings"] if r["targetLabel"] == "rank"]
            rep = {r.get("replacement", "$1") for r in ranks}
            if rep != ({f"${{1}}:{l}"} if nproc > 1 else {"$1"}):
                fail(f"{name}: endpoint {l}'s rank replacement {rep}")
    pol = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-trainers")][0]
    rule = pol["spec"]["ingress"][-1]["ports"][0]
    if rule["port"] != base or rule.get("endPort", base) != base + nproc - 1:
        fail(f"{name}: the trainers' policy admits metrics {rule}, not {base}..{base + nproc - 1}")
    res = c.get("resources", {})
    if ("--device=auto" in " ".join(c.get("args", []))) != bool(gpus):
        fail(f"{name}: the example's --device=auto is {'missing in a GPU pod' if gpus else 'set in a CPU pod'}")
    if gpus:
        for k in ("requests", "limits"):
            if res.get(k, {}).get("nvidia.com/gpu") != gpus:
                fail(f"{name}: resources.{k} has no nvidia.com/gpu: {gpus}: {res}")
        if not any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])):
            fail(f"{name}: no nvidia.com/gpu toleration: {spec.get('tolerations')}")
        if not spec.get("nodeSelector"):
            fail(f"{name}: the GPU node selector is missing")
    elif "nvidia.com/gpu" in str(res) or "tolerations" in spec:
        fail(f"{name}: a CPU pod with GPU resources or tolerations")
    print(f"{name}: {nproc} local rank(s), ports {base}..{base + nproc - 1} named and scraped"
          + (f", {gpus} GPUs requested, tolerations and node selector" if gpus else ""))


check("monitors", 1, 0)
check("default", 1, 0)
check("gpu-8", 8, 8)
check("ranks-4", 4, 0)
print("PASS ranks per pod")
