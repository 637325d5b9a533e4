#!/usr/bin/env python3
"""`podman kube play` of what the chart renders, with the images of
scripts/images: the coordinator Deployment (its ConfigMap and token), the
health probe answering inside the container (gradex-health-probe by exec,
the image has no shell), the indexed Job's 4 trainer pods, each as the Job
controller would make it (completion index annotation, JOB_COMPLETION_INDEX,
hostname/subdomain), running the example (torchrun of the Fashion-MNIST
trainer through gradex's DDP hook, 4 nodes) to the end, and a Prometheus on the
host scraping the pods' IPs through the rendered ServiceMonitor and
PodMonitor (selectors, named ports, relabelings).

The podman 4.3 adaptations are kube_pods.py's (Secret volumes as
ConfigMaps, the Service's and pod 0's DNS names as host aliases, grpc probes
made by exec instead, fieldRef and $(VAR) expansion, no containerPorts).

With --nproc 4 (ranks per pod): one trainer pod of 4 ranks
(workload.nprocPerNode 4; torchrun starts 4 processes in the pod), each
serving its metrics on its own port (GRADEX_METRICS_PORT + LOCAL_RANK), all
4 scraped through the PodMonitor's 4 endpoints, each series with its
local_rank and rank.

usage: kube_play.py HELMRENDER CHART WORKDIR [--nproc N]  (root; CONTAINERS_CONF set)
"""
import json, os, sys, time, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kube_pods as kp  # noqa: E402  (playing the rendered pods, their scrape jobs)
import live_check as lc  # noqa: E402

RENDER, CHART, WORK = sys.argv[1:4]
NPROC = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--nproc" else 1


def main():
    kp.init(WORK)
    version = yaml.safe_load(open(f"{CHART}/Chart.yaml"))["appVersion"]
    values = {
        "image": {"registry": "localhost"},
        "job": {"worldSize": 4},
        "workload": {"image": {"registry": "localhost"}, "replicas": 4 // NPROC, "nprocPerNode": NPROC,
                     # long enough for Prometheus (started once the pods have addresses) to scrape them
                     "example": {"epochs": 2, "maxSteps": 0},
                     "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]},
        "serviceMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "podMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
    }
    vf = f"{WORK}/values.yaml"
    yaml.safe_dump(values, open(vf, "w"))
    out = kp.sh(RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, CHART)
    docs = [d for d in yaml.safe_load_all(out) if d]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep, job = lc.one(objs, "Deployment"), lc.one(objs, "Job")
    svc = objs[("Service", "gx-gradex-coordinator")]
    smon, pmon = lc.one(objs, "ServiceMonitor"), lc.one(objs, "PodMonitor")
    token = kp.as_configmap(lc.one(objs, "Secret"))
    jobcm = objs[("ConfigMap", "gx-gradex-job")]
    for img in (dep["spec"]["template"]["spec"]["containers"][0]["image"],
                job["spec"]["template"]["spec"]["containers"][0]["image"]):
        if not img.endswith(f":{version}"):
            lc.fail(f"rendered image {img} is not tagged {version}")
        kp.sh("podman", "image", "exists", img)

    # The coordinator, its health probe made by exec (4.3 runs no grpc probe).
    cpod = kp.play_coordinator("coordinator", dep, [jobcm, token], "coordinator container serving")
    grpc = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
            if p["name"] == "grpc"][0]
    probe = kp.sh("podman", "exec", f"{cpod}-coordinator", "/usr/bin/gradex-health-probe",
                  f"--addr=127.0.0.1:{grpc}")
    print(f"coordinator pod: health probe by exec: {probe}")
    cip = kp.pod_ip(cpod)

    # The trainers: the Job controller's pods.
    tpl = job["spec"]["template"]
    n = job["spec"]["completions"]
    pod_names = kp.play_trainers("", job, token, {"ip": cip, "hostnames": [f"{svc['metadata']['name']}.gradex.svc"]})

    # Prometheus on the host, scrape jobs from the monitors, targets = pod IPs.
    if not lc.matches(smon["spec"]["selector"], svc["metadata"]["labels"]) or \
            not lc.matches(pmon["spec"]["selector"], tpl["metadata"]["labels"]):
        lc.fail("the monitors do not select the rendered Service / trainer pods")
    peps = pmon["spec"]["podMetricsEndpoints"]
    if len(peps) != NPROC:
        lc.fail(f"the PodMonitor has {len(peps)} endpoints for {NPROC} ranks per pod")
    pport = kp.start_prometheus({"global": {"scrape_interval": "1s"},
                                 "scrape_configs": kp.scrape_jobs(dep, cpod, cip, svc, smon, job, pmon, pod_names)})
    end = time.time() + 120
    while not ((r := lc.prom(pport, 'count(up{gradex_job="gx-gradex"} == 1)')) and r[0]["value"][1] == str(n * NPROC + 1)):
        if time.time() > end:
            with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/targets", timeout=10) as t:
                targets = json.load(t)["data"]["activeTargets"]
            why = "; ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']}" for t in targets)
            logs = kp.logs(f"{pod_names[0]}-trainer", tail=5)
            lc.fail(f"prometheus does not see {n * NPROC + 1} targets up: {why}\ntrainer 0: {logs.stdout}{logs.stderr}")
        time.sleep(1)
    print(f"prometheus: {n * NPROC + 1} targets up through the rendered monitors ({n} trainer pod(s) x {NPROC} rank(s), the coordinator)")
    if NPROC > 1:
        up = lc.prom(pport, 'up{gradex_job="gx-gradex",gradex_component="trainer"} == 1')
        got = sorted((m["metric"].get("local_rank"), m["metric"].get("rank")) for m in up)
        want = sorted((str(l), f"{i}:{l}") for i in range(n) for l in range(NPROC))
        if got != want:
            lc.fail(f"trainer targets' (local_rank, rank) labels {got}, expected {want}")
        print(f"each local rank scraped on its own port: (local_rank, rank) {got}")

    for i, p in enumerate(pod_names):
        ctr_name = f"{p}-trainer"
        rc = kp.sh("podman", "wait", ctr_name, timeout=600)
        logs = kp.logs(ctr_name)
        last = [l for l in (logs.stdout + logs.stderr).splitlines() if "] epoch " in l][-1:] or ["(no epoch line: not rank 0)"]
        if rc != "0":
            lc.fail(f"trainer pod {p} exited {rc}: {logs.stderr[-800:]}")
        print(f"trainer pod {i}: exit 0, {last[0][-100:]}")
    steps = lc.prom(pport, 'sum(last_over_time(gradex_agent_steps_total{outcome="ok"}[10m]))')
    print(f"prometheus: {steps[0]['value'][1]} ok steps in the trainers' last scrapes (1 s apart)")
    print("PASS kube play")


if __name__ == "__main__":
    try:
        main()
    finally:
        kp.down()
