#!/usr/bin/env python3
"""Render assertions for the DGS parameter servers (chart_test.sh): the
server objects (StatefulSet, headless Service, NetworkPolicy, PodMonitor)
exist only for a dgs job that asks for them; the servers' arguments are
flags gradex-agent's usage lists (agent/agent_cli_flags.cc), their snapshot
volume is the one --snapshot-dir names, their ports and labels are what the
policies and the PodMonitor select; the job config's ps block carries the
servers, shards and layer sizes (the example MLP's recomputed here); the
trainers run the DGS example against the coordinator (so none hosts a
server in-process) and admit the servers on their UCX range.

usage: ps_render_check.py RENDERS_DIR REPO_ROOT
"""
import json
import os
import re
import sys

import yaml

RENDERS, ROOT = sys.argv[1:3]
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
    return cond


def load(name):
    docs = [d for d in yaml.safe_load_all(open(f"{RENDERS}/{name}.yaml")) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def job_config(objs):
    return json.loads(objs[("ConfigMap", "gx-gradex-job")]["data"]["job.json"])


def agent_flags():
    src = open(f"{ROOT}/agent/agent_cli_flags.cc").read()
    usage = src[src.index("kUsage[]"):src.index(')";', src.index("kUsage[]"))]
    return set(re.findall(r"(--[a-z][a-z-]*)", usage))


def mlp_sizes(hidden):  # examples/train_fashion_mnist.py MLP: 784 -> hidden -> 10
    dims, out = [784] + list(hidden) + [10], []
    for a, b in zip(dims, dims[1:]):
        out += [a * b, b]
    return out


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def policy_admits(policy, labels, port):
    """Some ingress rule admits pods with `labels` on TCP `port`."""
    for rule in policy["spec"]["ingress"]:
        peers = [p for p in rule["from"] if "podSelector" in p and "namespaceSelector" not in p]
        if not any(matches(p["podSelector"]["matchLabels"], labels) for p in peers):
            continue
        ports = rule.get("ports")
        if ports is None or any(p["port"] <= port <= p.get("endPort", p["port"]) for p in ports):
            return True
    return False


def trainer_container(objs):
    return objs[("Job", "gx-gradex-trainer")]["spec"]["template"]["spec"]["containers"][0]


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def no_servers(name):
    objs = load(name)
    kinds = [(k, n) for (k, n) in objs if "ps-server" in n and "dashboard" not in n]
    check(not kinds, f"{name}: server objects rendered: {kinds}")
    check(not any(k == "StatefulSet" for k, _ in objs), f"{name}: a StatefulSet")
    for (k, n), o in objs.items():
        if k == "NetworkPolicy":
            check("ps-server" not in json.dumps(o), f"{name}: {n} names ps-server pods")
    return objs


def servers(name, replicas, tls):
    objs = load(name)
    sts = objs.get(("StatefulSet", "gx-gradex-ps-server"))
    if not check(sts is not None, f"{name}: no StatefulSet gx-gradex-ps-server"):
        return objs, None
    spec = sts["spec"]
    pod = spec["template"]
    c = pod["spec"]["containers"][0]
    check(spec["replicas"] == replicas, f"{name}: replicas {spec['replicas']} != {replicas}")
    check(spec["podManagementPolicy"] == "Parallel", f"{name}: servers not started together")
    check(matches(spec["selector"]["matchLabels"], pod["metadata"]["labels"]),
          f"{name}: the StatefulSet's selector misses its pods")
    svc = objs.get(("Service", spec["serviceName"]))
    check(svc is not None and svc["spec"].get("clusterIP") == "None",
          f"{name}: serviceName {spec['serviceName']} is not a headless Service")
    check(c["image"] == "gradex/agent:0.1.0", f"{name}: server image {c['image']}")
    check(c["command"] == ["/usr/bin/gradex-agent"], f"{name}: command {c['command']}")
    args = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "") for a in c["args"])
    known = agent_flags()
    for a in c["args"]:
        check(a.split("=", 1)[0] in known, f"{name}: gradex-agent has no flag {a}")
    want = {"role": "server", "coordinator": "gx-gradex-coordinator.gradex.svc:50051",
            "job": "gx-gradex", "token-file": "/etc/gradex/token/token",
            "agent-id": "$(POD_NAME)", "metrics-port": "9402", "metrics-any": ""}
    for k, v in want.items():
        check(args.get(k) == v, f"{name}: --{k} is {args.get(k)!r}, want {v!r}")
    check(("tls-ca" in args) == tls and ("tls-cert" in args) == tls and ("tls-key" in args) == tls,
          f"{name}: TLS flags {sorted(k for k in args if k.startswith('tls'))} with tls={tls}")
    env = env_of(c)
    check([e for e in c["env"] if e["name"] == "POD_NAME"][0]["valueFrom"]["fieldRef"]["fieldPath"]
          == "metadata.name", f"{name}: POD_NAME is not the pod's name")
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    snap = [m for m in mounts.values() if m["mountPath"] == args.get("snapshot-dir")]
    if check(len(snap) == 1 and not snap[0].get("readOnly"),
             f"{name}: --snapshot-dir {args.get('snapshot-dir')} is not a writable mount"):
        check(snap[0]["name"] in vols, f"{name}: the snapshot mount has no volume")
    for need in ("token", "tmp") + (("tls", "tls-client") if tls else ()):
        check(need in mounts and need in vols, f"{name}: no {need} volume mounted")
    sc, psc = c["securityContext"], pod["spec"]["securityContext"]
    check(psc.get("runAsNonRoot") is True and sc.get("readOnlyRootFilesystem") is True and
          sc.get("allowPrivilegeEscalation") is False and sc["capabilities"]["drop"] == ["ALL"],
          f"{name}: server security context {psc} {sc}")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(ports.get("gradex-metrics") == 9402, f"{name}: metrics port {ports}")
    # The servers listen on the job's UCX range, which the trainers' policy names.
    tenv = env_of(trainer_container(objs))
    check(env.get("UCX_TCP_PORT_RANGE") == tenv.get("UCX_TCP_PORT_RANGE"),
          f"{name}: servers' UCX range {env.get('UCX_TCP_PORT_RANGE')} != trainers'")
    return objs, sts


def policies(name, objs, sts, metrics_port=9402):
    labels = sts["spec"]["template"]["metadata"]["labels"]
    trainer = objs[("Job", "gx-gradex-trainer")]["spec"]["template"]["metadata"]["labels"]
    lo, hi = (int(x) for x in env_of(trainer_container(objs))["UCX_TCP_PORT_RANGE"].split("-"))
    pol = objs.get(("NetworkPolicy", "gx-gradex-ps-servers"))
    if not check(pol is not None, f"{name}: no NetworkPolicy for the servers"):
        return
    check(matches(pol["spec"]["podSelector"]["matchLabels"], labels),
          f"{name}: the servers' policy does not select them")
    for port in (lo, hi):
        check(policy_admits(pol, trainer, port), f"{name}: trainers not admitted to servers' UCX {port}")
        check(policy_admits(objs[("NetworkPolicy", "gx-gradex-trainers")], labels, port),
              f"{name}: servers not admitted to trainers' UCX {port}")
    check(not policy_admits(pol, trainer, lo - 1) and not policy_admits(pol, trainer, hi + 1),
          f"{name}: the servers' policy admits trainers outside the UCX range")
    check(not policy_admits(pol, labels, lo), f"{name}: servers admitted to each other")
    check(any(r["ports"] == [{"port": metrics_port, "protocol": "TCP"}] and
              any("namespaceSelector" in p for p in r["from"]) for r in pol["spec"]["ingress"]),
          f"{name}: no metrics rule for the servers")
    check(policy_admits(objs[("NetworkPolicy", "gx-gradex-coordinator")], labels, 50051),
          f"{name}: the servers cannot reach the coordinator")


def main():
    for name in ["default"] + [os.path.basename(f)[:-5] for f in sorted(os.listdir(RENDERS))
                               if f.endswith(".yaml") and not f.startswith(("dgs-", "default", "dashboards-only"))]:
        objs = no_servers(name)
        check("ps" not in job_config(objs), f"{name}: a ps block in a collective job's config")

    # Two servers, the example's MLP, a shared claim, mutual TLS, monitors.
    objs, sts = servers("dgs-servers", 2, tls=True)
    cfg = job_config(objs)
    want = {"servers": 2, "server_shards": 2, "max_staleness": 0, "snapshot_interval_ms": 30000,
            "layer_sizes": mlp_sizes([256, 128])}
    check(cfg.get("ps") == want, f"dgs-servers: ps {cfg.get('ps')} != {want}")
    check(sum(want["layer_sizes"]) == 235146, "the example MLP is not 235,146 parameters")
    if sts:
        vol = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "snapshots"][0]
        check(vol.get("persistentVolumeClaim") == {"claimName": "gradex-snapshots"},
              f"dgs-servers: snapshot volume {vol}")
        policies("dgs-servers", objs, sts)
        pm = objs.get(("PodMonitor", "gx-gradex-ps-servers"))
        if check(pm is not None, "dgs-servers: no PodMonitor for the servers"):
            check(matches(pm["spec"]["selector"]["matchLabels"], sts["spec"]["template"]["metadata"]["labels"]),
                  "dgs-servers: the PodMonitor does not select the servers")
            check(pm["spec"]["podMetricsEndpoints"][0]["port"] == "gradex-metrics",
                  "dgs-servers: the PodMonitor's port is not gradex-metrics")
            check(not matches(objs[("PodMonitor", "gx-gradex-trainers")]["spec"]["selector"]["matchLabels"],
                              sts["spec"]["template"]["metadata"]["labels"]),
                  "dgs-servers: the trainers' PodMonitor also selects the servers")
    tc = trainer_container(objs)
    cmd = " ".join(tc["args"])
    for part in ("train_dgs_fashion_mnist.py --backend gradex", "--mode=dgs", "--density=0.01",
                 "--hidden=256,128"):
        check(part in cmd, f"dgs-servers: the trainers' command lacks {part!r}: {cmd}")
    check(env_of(tc).get("GRADEX_COORDINATOR") == "gx-gradex-coordinator.gradex.svc:50051",
          "dgs-servers: trainers without GRADEX_COORDINATOR would host a server in-process")

    # One server, 3 shards of the user's model, a staleness bound, an emptyDir.
    objs, sts = servers("dgs-custom", 1, tls=False)
    cfg = job_config(objs)
    want = {"servers": 1, "server_shards": 3, "max_staleness": 3, "snapshot_interval_ms": 0,
            "layer_sizes": [1000, 10, 5]}
    check(cfg.get("ps") == want, f"dgs-custom: ps {cfg.get('ps')} != {want}")
    if sts:
        vol = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "snapshots"][0]
        check(vol.get("emptyDir") == {"sizeLimit": "1Gi"}, f"dgs-custom: snapshot volume {vol}")
        check(("PodMonitor", "gx-gradex-ps-servers") not in objs, "dgs-custom: a PodMonitor with podMonitor off")
        policies("dgs-custom", objs, sts)
    check(trainer_container(objs)["command"] == ["torchrun"], "dgs-custom: not the user's command")

    # Servers elsewhere: no server objects; ASGD through the example.
    objs = no_servers("dgs-no-servers")
    want = {"servers": 1, "server_shards": 1, "max_staleness": 0, "snapshot_interval_ms": 5000,
            "layer_sizes": mlp_sizes([64])}
    check(job_config(objs).get("ps") == want, f"dgs-no-servers: ps {job_config(objs).get('ps')} != {want}")
    cmd = " ".join(trainer_container(objs)["args"])
    for part in ("--mode=asgd", "--hidden=64", "--lr=0.05"):
        check(part in cmd, f"dgs-no-servers: the trainers' command lacks {part!r}")

    if FAILS:
        print("FAIL ps render checks:\n  " + "\n  ".join(FAILS), file=sys.stderr)
        sys.exit(1)
    print("ps render checks: server objects only when asked; args, volumes, ports, policies, monitor, job config")


if __name__ == "__main__":
    main()
