#!/usr/bin/env python3
"""Ranks per pod and GPU pods, on chart_test.sh's renders: every local rank
has a named metrics port (gx-metrics-<l> = metricsPort + l), the PodMonitor
scrapes each of them (an endpoint per port name the pod declares) and labels
each series with its local rank and rank, the NetworkPolicy admits the whole
metrics range, and a gpusPerPod pod requests its GPUs, runs one rank per GPU
and carries the GPU tolerations and node selector. Every trainer (indexed Job
and PyTorchJob) names its node for the hierarchical exchange by its pod's name
(GRADEX_NODE: the same for the pod's ranks, different for other pods) and gets
job.hierarchy as GRADEX_HIERARCHY.
usage: ranks_render_check.py RENDERS_DIR"""
import sys

import yaml

RENDERS = sys.argv[1]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def load(name):
    return [d for d in yaml.safe_load_all(open(f"{RENDERS}/{name}.yaml")) if d]


def check_node(name, c, hierarchy):
    """The container's node identity (its pod's name) and hierarchy mode."""
    env = {e["name"]: e for e in c["env"]}
    node = env.get("GRADEX_NODE", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    if node != "metadata.name":
        fail(f"{name}: GRADEX_NODE is {env.get('GRADEX_NODE')}, not the pod's name (metadata.name)")
    if env.get("GRADEX_HIERARCHY", {}).get("value") != hierarchy:
        fail(f"{name}: GRADEX_HIERARCHY is {env.get('GRADEX_HIERARCHY')}, expected {hierarchy!r}")


def check(name, nproc, gpus, hierarchy="auto"):
    docs = load(name)
    job = [d for d in docs if d["kind"] == "Job"][0]
    spec = job["spec"]["template"]["spec"]
    c = spec["containers"][0]
    check_node(name, c, hierarchy)
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
          + (f", {gpus} GPUs requested, tolerations and node selector" if gpus else "")
          + f", node = pod name, hierarchy {hierarchy}")


def check_pytorchjob(name):
    job = [d for d in load(name) if d["kind"] == "PyTorchJob"][0]
    specs = job["spec"]["pytorchReplicaSpecs"]
    for role, rs in specs.items():
        check_node(f"{name} {role}", rs["template"]["spec"]["containers"][0], "auto")
    print(f"{name}: {', '.join(specs)}: node = pod name, hierarchy auto")


check("monitors", 1, 0)
check("default", 1, 0)
check("gpu-8", 8, 8)
check("ranks-4", 4, 0)
check("hierarchy-off", 2, 0, hierarchy="off")
check_pytorchjob("pytorchjob")
print("PASS ranks per pod")
