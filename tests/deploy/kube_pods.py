"""What the `podman kube play` checks (kube_play.py, kube_play_two.py,
kube_play_ps.py) share: playing the rendered coordinator Deployment and the
indexed Job's trainer pods as the Job controller would make them, and the
scrape jobs the rendered ServiceMonitor and PodMonitor give.

podman 4.3 (Debian 12) adaptations, each mirrored in nothing the chart
renders: the token Secret is played as a ConfigMap (4.3's kube play panics
on Secret volumes); the Service's DNS name and pod 0's (the rendezvous'
MASTER_ADDR) become hostAliases entries (podman has no Services); grpc
probes, which 4.3 does not run, are dropped (the checks make the same
Health/Check by exec); fieldRef env values and $(VAR)s in args, which 4.3
leaves alone, are resolved as the kubelet does; containerPorts are dropped
(4.3 publishes them on the host, where the trainers' would collide): the
pods are reached on their own addresses at the ports the rendered objects
name.

Call init(WORKDIR) first; down() in a `finally` removes what was played and
the processes live_check started.
"""
import base64, copy, json, os, subprocess
import yaml

import live_check as lc

WORK = None
PODS = []  # the YAML files played, for down()


def init(work):
    global WORK
    WORK = lc.WORK = work  # lc.fail prints the logs under it, lc.start writes there
    os.makedirs(work, exist_ok=True)


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
        c.pop("ports", None)  # 4.3 publishes them on the host: the trainers' would collide
        for probe in ("livenessProbe", "readinessProbe"):
            if "grpc" in c.get(probe, {}):
                c.pop(probe)


def play(name, docs):
    path = f"{WORK}/{name}.yaml"
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f)
    sh("podman", "kube", "play", path)
    PODS.append(path)


def pod_ip(pod):
    infra = json.loads(sh("podman", "pod", "inspect", pod))["InfraContainerID"]
    nets = json.loads(sh("podman", "inspect", infra))[0]["NetworkSettings"]["Networks"]
    return list(nets.values())[0]["IPAddress"]


def logs(ctr, tail=None):
    argv = ["podman", "logs"] + (["--tail", str(tail)] if tail else []) + [ctr]
    return subprocess.run(argv, capture_output=True, text=True)


def resolve(c, meta, index):
    """fieldRefs (the pod's name, its completion index) and $(VAR)s in args,
    as the kubelet resolves them (podman 4.3 does not)."""
    env = {}
    for e in c.get("env", []):
        if "valueFrom" in e:
            path = e.pop("valueFrom")["fieldRef"]["fieldPath"]
            e["value"] = meta["name"] if path == "metadata.name" else str(index)
        e["value"] = lc.expand(e["value"], env)
        env[e["name"]] = e["value"]
    c["args"] = [lc.expand(a, env) for a in c.get("args", [])]


def play_coordinator(name, dep, docs, what, deployment_name=None):
    """Plays the coordinator Deployment (renamed to `deployment_name` when
    given) with `docs` (its job ConfigMap, the token) and waits until it
    serves; returns its pod's name."""
    d = copy.deepcopy(dep)
    adapt(d["spec"]["template"]["spec"])
    if deployment_name:
        d["metadata"]["name"] = deployment_name
    play(name, [d] + docs)
    cpod = f"{d['metadata']['name']}-pod-0"
    ctr = f"{cpod}-coordinator"
    lc.wait_until(what, lambda: "serving on" in (lambda r: r.stdout + r.stderr)(logs(ctr)), 60)
    return cpod


def play_trainers(tag, job, token, svc_alias, pod_name=None):
    """Plays the indexed Job's pods as the Job controller makes them
    (completion index annotation, JOB_COMPLETION_INDEX, hostname), each with
    the token, the coordinator Service's alias and pod 0's (MASTER_ADDR);
    `pod_name(i)` names pod i (default: the Job's name and i). Returns the
    pods' names."""
    tpl = job["spec"]["template"]
    names = []
    for i in range(job["spec"]["completions"]):
        meta = copy.deepcopy(tpl["metadata"])
        meta["name"] = pod_name(i) if pod_name else f"{job['metadata']['name']}-{i}"
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        spec = copy.deepcopy(tpl["spec"])
        adapt(spec)
        spec["hostname"] = meta["name"]
        c = spec["containers"][0]
        master = [e["value"] for e in c["env"] if e["name"] == "MASTER_ADDR"][0]
        spec["hostAliases"] = [svc_alias,
                               {"ip": "127.0.0.1" if i == 0 else pod_ip(names[0]), "hostnames": [master]}]
        c["env"].append({"name": "JOB_COMPLETION_INDEX", "value": str(i)})
        resolve(c, meta, i)
        play(f"{tag}trainer{i}", [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, token])
        names.append(meta["name"])
    return names


def scrape_jobs(dep, cpod, cip, svc, smon, job, pmon, pods):
    """Prometheus scrape jobs as the operator generates them from the
    monitors: the ServiceMonitor's endpoint on the coordinator pod, and one
    job per PodMonitor endpoint (one per local rank), each endpoint's port
    name resolved in the trainer pods, targets at the pods' addresses."""
    ep = smon["spec"]["endpoints"][0]
    sport = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]][0]["targetPort"]
    cport = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]
             if p["name"] == sport][0]
    jobs = [{"job_name": f"serviceMonitor/gradex/{smon['metadata']['name']}/0",
             "scrape_timeout": ep["scrapeTimeout"],
             "static_configs": [{"targets": [f"{cip}:{cport}"],
                                 "labels": lc.meta_labels(dep["spec"]["template"]["metadata"], cpod)}],
             "relabel_configs": lc.relabel(ep["relabelings"])}]
    tpl = job["spec"]["template"]

    def index(i):  # pod i's metadata as the Job controller sets it
        return {**tpl["metadata"], "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}}

    for k, pep in enumerate(pmon["spec"]["podMetricsEndpoints"]):
        tport = [p["containerPort"] for p in tpl["spec"]["containers"][0]["ports"] if p["name"] == pep["port"]][0]
        jobs.append({"job_name": f"podMonitor/gradex/{pmon['metadata']['name']}/{k}",
                     "scrape_timeout": pep["scrapeTimeout"],
                     "static_configs": [{"targets": [f"{pod_ip(p)}:{tport}"], "labels": lc.meta_labels(index(i), p)}
                                        for i, p in enumerate(pods)],
                     "relabel_configs": lc.relabel(pep["relabelings"])})
    return jobs


def start_prometheus(cfg):
    """Writes `cfg` and starts Prometheus on the host; returns its port."""
    yaml.safe_dump(cfg, open(f"{WORK}/prometheus.yml", "w"))
    port = lc.free_port()
    lc.start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                            f"--storage.tsdb.path={WORK}/prom-data", f"--web.listen-address=127.0.0.1:{port}"])
    lc.wait_until("prometheus ready",
                  lambda: "Server is ready to receive web requests" in open(f"{WORK}/prometheus.log").read(), 30)
    return port


def down():
    for path in reversed(PODS):
        subprocess.run(["podman", "kube", "down", path], capture_output=True)
    for p in lc.PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
