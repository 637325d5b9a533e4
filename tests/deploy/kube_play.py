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

podman 4.3 (Debian 12) adaptations, each mirrored in nothing the chart
renders: the token Secret is played as a ConfigMap (4.3's kube play
panics on Secret volumes); the Service's DNS name becomes a hostAliases
entry (podman has no Services); grpc probes, which 4.3 does not run, are
dropped and the same Health/Check is made by exec; pod 0's DNS name (the
rendezvous' MASTER_ADDR) becomes a hostAliases entry too; fieldRef env values and
$(VAR)s in args, which 4.3 leaves alone, are resolved as the kubelet does;
containerPorts are dropped (4.3 publishes them on the host, where the 4
trainers' would collide): the pods are reached on their own addresses at
the ports the rendered objects name.

With --nproc 4 (ranks per pod): one trainer pod of 4 ranks
(workload.nprocPerNode 4; torchrun starts 4 processes in the pod), each
serving its metrics on its own port (GRADEX_METRICS_PORT + LOCAL_RANK), all
4 scraped through the PodMonitor's 4 endpoints, each series with its
local_rank and rank.

usage: kube_play.py HELMRENDER CHART WORKDIR [--nproc N]  (root; CONTAINERS_CONF set)
"""
import base64, copy, json, os, subprocess, sys, time, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_check as lc  # noqa: E402  (the monitor -> scrape config helpers)

RENDER, CHART, WORK = sys.argv[1:4]
NPROC = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[4] == "--nproc" else 1
lc.WORK = WORK
PODS = []


def sh(*argv, check=True, timeout=300):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode:
        lc.fail(f"{' '.join(argv[:4])}: {r.stdout[-800:]}{r.stderr[-1500:]}")
    return r.stdout.strip()


def as_configmap(secret):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": secret["metadata"],
            "data": {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}}


def adapt(spec):
    for v in spec.get("volumes", []):
        if "secret" in v:
            v["configMap"] = {"name": v.pop("secret")["secretName"]}
    for c in spec["containers"]:
        c.pop("ports", None)  # 4.3 publishes them on the host: 4 trainers would collide
        for probe in ("livenessProbe", "readinessProbe"):
            if "grpc" in c.get(probe, {}):
                c.pop(probe)


def play(name, docs):
    path = f"{WORK}/{name}.yaml"
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f)
    sh("podman", "kube", "play", path)
    PODS.append(path)


def main():
    os.makedirs(WORK, exist_ok=True)
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
    out = sh(RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, CHART)
    docs = [d for d in yaml.safe_load_all(out) if d]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep, job = lc.one(objs, "Deployment"), lc.one(objs, "Job")
    svc = objs[("Service", "gx-gradex-coordinator")]
    smon, pmon = lc.one(objs, "ServiceMonitor"), lc.one(objs, "PodMonitor")
    token = as_configmap(lc.one(objs, "Secret"))
    jobcm = objs[("ConfigMap", "gx-gradex-job")]
    for img in (dep["spec"]["template"]["spec"]["containers"][0]["image"],
                job["spec"]["template"]["spec"]["containers"][0]["image"]):
        if not img.endswith(f":{version}"):
            lc.fail(f"rendered image {img} is not tagged {version}")
        sh("podman", "image", "exists", img)

    # The coordinator.
    d = copy.deepcopy(dep)
    adapt(d["spec"]["template"]["spec"])
    play("coordinator", [d, jobcm, token])
    cpod = f"{dep['metadata']['name']}-pod-0"
    ctr = f"{cpod}-coordinator"
    lc.wait_until("coordinator container serving",
                  lambda: "serving on" in sh("podman", "logs", ctr, check=False) +
                  subprocess.run(["podman", "logs", ctr], capture_output=True, text=True).stderr, 60)
    grpc = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
            if p["name"] == "grpc"][0]
    probe = sh("podman", "exec", ctr, "/usr/bin/gradex-health-probe", f"--addr=127.0.0.1:{grpc}")
    print(f"coordinator pod: health probe by exec: {probe}")
    infra = json.loads(sh("podman", "pod", "inspect", cpod))["InfraContainerID"]
    nets = json.loads(sh("podman", "inspect", infra))[0]["NetworkSettings"]["Networks"]
    cip = list(nets.values())[0]["IPAddress"]
    svc_name = f"{svc['metadata']['name']}.gradex.svc"

    def pod_ip(pod):
        infra = json.loads(sh("podman", "pod", "inspect", pod))["InfraContainerID"]
        return list(json.loads(sh("podman", "inspect", infra))[0]["NetworkSettings"]["Networks"].values())[0]["IPAddress"]

    # The trainers: the Job controller's pods.
    tpl = job["spec"]["template"]
    n = job["spec"]["completions"]
    pod_names = []
    for i in range(n):
        meta = copy.deepcopy(tpl["metadata"])
        meta["name"] = f"{job['metadata']['name']}-{i}"
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        spec = copy.deepcopy(tpl["spec"])
        adapt(spec)
        spec["hostname"] = meta["name"]
        c = spec["containers"][0]
        master = [e["value"] for e in c["env"] if e["name"] == "MASTER_ADDR"][0]
        spec["hostAliases"] = [{"ip": cip, "hostnames": [svc_name]},
                               {"ip": "127.0.0.1" if i == 0 else pod_ip(pod_names[0]), "hostnames": [master]}]
        c["env"].append({"name": "JOB_COMPLETION_INDEX", "value": str(i)})
        # podman 4.3 neither resolves fieldRefs nor expands $(VAR) in args:
        # done here as the kubelet does.
        env = {}
        for e in c["env"]:
            if "valueFrom" in e:
                path = e.pop("valueFrom")["fieldRef"]["fieldPath"]
                e["value"] = meta["name"] if path == "metadata.name" else str(i)
            e["value"] = lc.expand(e["value"], env)
            env[e["name"]] = e["value"]
        c["args"] = [lc.expand(a, env) for a in c["args"]]
        play(f"trainer{i}", [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, token])
        pod_names.append(meta["name"])

    # Prometheus on the host, scrape jobs from the monitors, targets = pod IPs.
    if not lc.matches(smon["spec"]["selector"], svc["metadata"]["labels"]) or \
            not lc.matches(pmon["spec"]["selector"], tpl["metadata"]["labels"]):
        lc.fail("the monitors do not select the rendered Service / trainer pods")
    ep = smon["spec"]["endpoints"][0]
    sport = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]][0]["targetPort"]
    cport = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"] if p["name"] == sport][0]
    cfg = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": f"serviceMonitor/gradex/{smon['metadata']['name']}/0", "scrape_timeout": ep["scrapeTimeout"],
         "static_configs": [{"targets": [f"{cip}:{cport}"], "labels": lc.meta_labels(dep["spec"]["template"]["metadata"], cpod)}],
         "relabel_configs": lc.relabel(ep["relabelings"])}]}
    # One scrape job per PodMonitor endpoint (one per local rank), as the
    # operator generates them; each endpoint's port name resolved in the pod.
    peps = pmon["spec"]["podMetricsEndpoints"]
    if len(peps) != NPROC:
        lc.fail(f"the PodMonitor has {len(peps)} endpoints for {NPROC} ranks per pod")
    for k, pep in enumerate(peps):
        tport = [p["containerPort"] for p in tpl["spec"]["containers"][0]["ports"] if p["name"] == pep["port"]][0]
        cfg["scrape_configs"].append(
            {"job_name": f"podMonitor/gradex/{pmon['metadata']['name']}/{k}", "scrape_timeout": pep["scrapeTimeout"],
             "static_configs": [{"targets": [f"{pod_ip(p)}:{tport}"],
                                 "labels": lc.meta_labels({**tpl["metadata"], "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}}, p)}
                                for i, p in enumerate(pod_names)],
             "relabel_configs": lc.relabel(pep["relabelings"])})
    yaml.safe_dump(cfg, open(f"{WORK}/prometheus.yml", "w"))
    pport = lc.free_port()
    lc.start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                            f"--storage.tsdb.path={WORK}/prom-data", f"--web.listen-address=127.0.0.1:{pport}"])
    lc.wait_until("prometheus ready",
                  lambda: "Server is ready to receive web requests" in open(f"{WORK}/prometheus.log").read(), 30)
    end = time.time() + 120
    while not ((r := lc.prom(pport, 'count(up{gradex_job="gx-gradex"} == 1)')) and r[0]["value"][1] == str(n * NPROC + 1)):
        if time.time() > end:
            with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/targets", timeout=10) as t:
                targets = json.load(t)["data"]["activeTargets"]
            why = "; ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']}" for t in targets)
            logs = subprocess.run(["podman", "logs", "--tail", "5", f"{pod_names[0]}-trainer"],
                                  capture_output=True, text=True)
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
        rc = sh("podman", "wait", ctr_name, timeout=600)
        logs = subprocess.run(["podman", "logs", ctr_name], capture_output=True, text=True)
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
        for path in reversed(PODS):
            subprocess.run(["podman", "kube", "down", path], capture_output=True)
        for p in lc.PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
