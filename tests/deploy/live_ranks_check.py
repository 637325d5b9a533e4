#!/usr/bin/env python3
"""Ranks per pod, live on this machine: the chart rendered for one trainer
pod of 4 local ranks (workload.nprocPerNode 4), its coordinator, the pod's
rendered command (torchrun --nproc_per_node 4 of the example, environment
expanded as the kubelet does), and Prometheus with one scrape job per
endpoint of the rendered PodMonitor (as the Prometheus Operator generates
them; each endpoint's named port resolved through the pod's ports). All 4
ranks' endpoints must be up, each series labelled with its local_rank and
rank, each serving a registry of its own (4 distinct agent ids' steps), and
the pod must exit 0.
usage: live_ranks_check.py BIN_DIR HELMRENDER CHART WORKDIR"""
import base64
import json
import os
import socket
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_check as lc  # noqa: E402

NPROC = 4


def free_base(n):
    """A base with n consecutive ports free on every address, below the
    ephemeral range (as live_check.listen_port)."""
    for base in range(21000, 32000 - n, 97):
        ok = True
        for p in range(base, base + n):
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", p))
            except OSError:
                ok = False
            finally:
                s.close()
            if not ok:
                break
        if ok:
            return base
    lc.fail(f"no {n} consecutive free ports")


def main():
    os.makedirs(lc.WORK, exist_ok=True)
    values = {
        "job": {"worldSize": NPROC, "algorithm": "spardl", "density": 0.05},
        "workload": {"replicas": 1, "nprocPerNode": NPROC,
                     "example": {"epochs": 1, "maxSteps": 150},
                     "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]},
        "serviceMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "podMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
    }
    vf = os.path.join(lc.WORK, "values.yaml")
    yaml.safe_dump(values, open(vf, "w"))
    out = subprocess.run([lc.RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, lc.CHART],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        lc.fail(f"render: {out.stderr}")
    objs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    dep, job, pmon = lc.one(objs, "Deployment"), lc.one(objs, "Job"), lc.one(objs, "PodMonitor")
    job_cm = objs[("ConfigMap", "gx-gradex-job")]
    jobid = json.loads(job_cm["data"]["job.json"])["job_id"]
    os.makedirs(f"{lc.WORK}/etc/job", exist_ok=True)
    os.makedirs(f"{lc.WORK}/etc/token", exist_ok=True)
    open(f"{lc.WORK}/etc/job/job.json", "w").write(job_cm["data"]["job.json"])
    for k, v in lc.one(objs, "Secret")["data"].items():
        open(f"{lc.WORK}/etc/token/{k}", "wb").write(base64.b64decode(v))

    def local_path(s):
        return s.replace("/etc/gradex/job", f"{lc.WORK}/etc/job").replace("/etc/gradex/token", f"{lc.WORK}/etc/token")

    # The coordinator on mapped ports.
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    grpc_port = lc.free_port()
    args = [local_path(a).replace(f"--listen=0.0.0.0:{cports['grpc']}", f"--listen=127.0.0.1:{grpc_port}")
            .replace(f"--metrics-port={cports['metrics']}", "--metrics-port=0") for a in c["args"]]
    lc.start("coordinator", [f"{lc.BIN}/gradex-coordinator"] + args)
    lc.wait_until("coordinator serving", lambda: "serving on" in open(f"{lc.WORK}/coordinator.log").read(), 30)

    # The pod: its ports, one per local rank, mapped to a free base here.
    tpl = job["spec"]["template"]
    jc = tpl["spec"]["containers"][0]
    if not lc.matches(pmon["spec"]["selector"], tpl["metadata"]["labels"]):
        lc.fail("the PodMonitor does not select the trainer pod")
    tports = {p["name"]: p["containerPort"] for p in jc["ports"]}
    env = {}
    name = "gx-gradex-trainer-0-x0"
    for e in jc["env"]:
        if "value" in e:
            env[e["name"]] = lc.expand(e["value"], env)
        elif e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            env[e["name"]] = name
        else:
            env[e["name"]] = "0"
    rendered_base = int(env["GRADEX_METRICS_PORT"])
    base = free_base(NPROC)
    eps = pmon["spec"]["podMetricsEndpoints"]
    if len(eps) != NPROC:
        lc.fail(f"the PodMonitor has {len(eps)} endpoints for {NPROC} local ranks")
    scrape = []
    meta = {**tpl["metadata"], "annotations": {"batch.kubernetes.io/job-completion-index": "0"}}
    for i, ep in enumerate(eps):
        if ep["port"] not in tports:
            lc.fail(f"PodMonitor port {ep['port']} is not a trainer container port: {sorted(tports)}")
        port = base + tports[ep["port"]] - rendered_base  # the container port, mapped
        scrape.append({"job_name": f"podMonitor/gradex/{pmon['metadata']['name']}/{i}",
                       "scrape_interval": ep["interval"], "scrape_timeout": ep["scrapeTimeout"],
                       "metrics_path": ep.get("path", "/metrics"),
                       "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": lc.meta_labels(meta, name)}],
                       "relabel_configs": lc.relabel(ep["relabelings"])})
    yaml.safe_dump({"global": {"scrape_interval": "1s"}, "scrape_configs": scrape},
                   open(f"{lc.WORK}/prometheus.yml", "w"))
    pport = lc.free_port()
    lc.start("prometheus", ["prometheus", f"--config.file={lc.WORK}/prometheus.yml",
                            f"--storage.tsdb.path={lc.WORK}/prom-data", f"--web.listen-address=127.0.0.1:{pport}"])
    lc.wait_until("prometheus ready",
                  lambda: "Server is ready to receive web requests" in open(f"{lc.WORK}/prometheus.log").read(), 30)

    env.update({"GRADEX_COORDINATOR": f"127.0.0.1:{grpc_port}", "GRADEX_TOKEN_FILE": local_path(env["GRADEX_TOKEN_FILE"]),
                "GRADEX_METRICS_PORT": str(base), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(lc.listen_port())})
    if env["NPROC_PER_NODE"] != str(NPROC):
        lc.fail(f"NPROC_PER_NODE {env['NPROC_PER_NODE']}")
    argv = [lc.expand(a, env).replace("/opt/gradex/examples/", f"{lc.ROOT}/examples/")
            for a in jc["command"] + jc["args"]]
    path = {"PYTHONPATH": os.path.abspath(f"{lc.BIN}/../python"), "TMPDIR": lc.WORK}
    t0 = time.time()
    pod = lc.start("trainer-pod", argv, env={**os.environ, **env, **path})

    def all_up():
        r = lc.prom(pport, f'up{{gradex_job="{jobid}",gradex_component="trainer"}} == 1')
        return r if len(r) == NPROC else None
    up = lc.wait_until(f"{NPROC} rank endpoints of the pod up", all_up, 120)
    got = sorted((m["metric"]["local_rank"], m["metric"]["rank"], m["metric"]["instance"]) for m in up)
    want = [(str(l), f"0:{l}") for l in range(NPROC)]
    if [(a, b) for a, b, _ in got] != want:
        lc.fail(f"targets' local_rank/rank labels {got}, expected {want}")
    print(f"prometheus: {NPROC} endpoints of one pod up: " + ", ".join(f"{i} local_rank={a} rank={b}" for a, b, i in got))

    # Each endpoint serves its own process: a step counter per local rank,
    # from 4 different registries (4 distinct epoch ranks).
    def stepping():
        r = lc.prom(pport, f'gradex_agent_steps_total{{gradex_job="{jobid}",outcome="ok"}} > 0')
        return r if len(r) == NPROC else None
    lc.wait_until(f"steps counted on all {NPROC} endpoints", stepping, 120)
    ranks = lc.prom(pport, f'gradex_agent_rank{{gradex_job="{jobid}"}}')
    epoch_ranks = sorted(int(float(r["value"][1])) for r in ranks)
    if epoch_ranks != list(range(NPROC)):
        lc.fail(f"the {NPROC} endpoints report epoch ranks {epoch_ranks}: not one registry each")
    print(f"each endpoint its own rank's registry: epoch ranks {epoch_ranks}, steps counted on each")
    try:
        rc = pod.wait(timeout=600)
    except subprocess.TimeoutExpired:
        lc.fail("the trainer pod still running after 600 s")
    if rc != 0:
        lc.fail(f"the trainer pod exited {rc}")
    print(f"trainer pod: {NPROC} ranks, exit 0 after {time.time() - t0:.0f} s")
    print("PASS live ranks per pod")


if __name__ == "__main__":
    lc.BIN, lc.RENDER, lc.CHART, lc.WORK = sys.argv[1:5]
    try:
        main()
    finally:
        for p in lc.PROCS:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
