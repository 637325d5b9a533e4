#!/usr/bin/env python3
"""Two jobs in one namespace under `podman kube play`: releases train1 and
train2 of the chart, rendered into namespace "gradex" with their monitors
and alert rules, each played as kube_play.py plays one (coordinator pod, 2
trainer pods of the indexed Job running the example), side by side on one
podman network, and one Prometheus on the host with both releases' scrape
jobs (from their ServiceMonitor and PodMonitor) and both PrometheusRules.
Checks: no object of one release has the name of the other's; every target
of both jobs is up under its own gradex_job; both jobs run to the end; and
when the trainers have exited, each release's GradexRankMissing rule
(scoped to its job) alerts on its own job's ranks only.

usage: kube_play_two.py HELMRENDER CHART WORKDIR  (root; CONTAINERS_CONF set)
"""
import copy, json, os, subprocess, sys, time, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_check as lc  # noqa: E402
import kube_play as kp  # noqa: E402  (sh, adapt, play, as_configmap; reads argv[1:4] as we do)

RENDER, CHART, WORK = sys.argv[1:4]
RELEASES = ("train1", "train2")
RANKS = 2


def render(rel):
    values = {
        "image": {"registry": "localhost"},
        "job": {"worldSize": RANKS},
        "workload": {"image": {"registry": "localhost"}, "replicas": RANKS,
                     "example": {"epochs": 1, "maxSteps": 0},
                     "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]},
        "serviceMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "podMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "prometheusRule": {"enabled": True, "for": "2s"},
    }
    vf = f"{WORK}/{rel}-values.yaml"
    yaml.safe_dump(values, open(vf, "w"))
    out = kp.sh(RENDER, "--name", rel, "--namespace", "gradex", "-f", vf, CHART)
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def pod_ip(pod):
    infra = json.loads(kp.sh("podman", "pod", "inspect", pod))["InfraContainerID"]
    return list(json.loads(kp.sh("podman", "inspect", infra))[0]["NetworkSettings"]["Networks"].values())[0]["IPAddress"]


def start_release(rel, objs):
    """Plays the coordinator and the trainers; returns the scrape jobs,
    the rule file and the trainer pod names."""
    dep, job = lc.one(objs, "Deployment"), lc.one(objs, "Job")
    svc = [o for (k, _), o in objs.items() if k == "Service" and o["metadata"]["name"].endswith("-coordinator")][0]
    smon, pmon, rule = lc.one(objs, "ServiceMonitor"), lc.one(objs, "PodMonitor"), lc.one(objs, "PrometheusRule")
    token = kp.as_configmap(lc.one(objs, "Secret"))
    jobcm = [o for (k, n), o in objs.items() if k == "ConfigMap" and n.endswith("-job")][0]
    d = copy.deepcopy(dep)
    kp.adapt(d["spec"]["template"]["spec"])
    kp.play(f"{rel}-coordinator", [d, jobcm, token])
    cpod = f"{dep['metadata']['name']}-pod-0"
    ctr = f"{cpod}-coordinator"
    lc.wait_until(f"{rel}: coordinator serving",
                  lambda: "serving on" in subprocess.run(["podman", "logs", ctr], capture_output=True, text=True).stderr, 60)
    cip = pod_ip(cpod)
    svc_name = f"{svc['metadata']['name']}.gradex.svc"
    tpl = job["spec"]["template"]
    pods = []
    for i in range(job["spec"]["completions"]):
        meta = copy.deepcopy(tpl["metadata"])
        meta["name"] = f"{job['metadata']['name']}-{i}"
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        spec = copy.deepcopy(tpl["spec"])
        kp.adapt(spec)
        spec["hostname"] = meta["name"]
        c = spec["containers"][0]
        master = [e["value"] for e in c["env"] if e["name"] == "MASTER_ADDR"][0]
        spec["hostAliases"] = [{"ip": cip, "hostnames": [svc_name]},
                               {"ip": "127.0.0.1" if i == 0 else pod_ip(pods[0]), "hostnames": [master]}]
        env = {}
        for e in c["env"]:
            if "valueFrom" in e:
                path = e.pop("valueFrom")["fieldRef"]["fieldPath"]
                e["value"] = meta["name"] if path == "metadata.name" else str(i)
            e["value"] = lc.expand(e["value"], env)
            env[e["name"]] = e["value"]
        c["args"] = [lc.expand(a, env) for a in c["args"]]
        kp.play(f"{rel}-trainer{i}", [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, token])
        pods.append(meta["name"])
    ep = smon["spec"]["endpoints"][0]
    sport = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]][0]["targetPort"]
    cport = [p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"] if p["name"] == sport][0]
    jobs = [{"job_name": f"serviceMonitor/gradex/{smon['metadata']['name']}/0", "scrape_timeout": ep["scrapeTimeout"],
             "static_configs": [{"targets": [f"{cip}:{cport}"], "labels": lc.meta_labels(dep["spec"]["template"]["metadata"], cpod)}],
             "relabel_configs": lc.relabel(ep["relabelings"])}]
    for k, pep in enumerate(pmon["spec"]["podMetricsEndpoints"]):
        tport = [p["containerPort"] for p in tpl["spec"]["containers"][0]["ports"] if p["name"] == pep["port"]][0]
        jobs.append({"job_name": f"podMonitor/gradex/{pmon['metadata']['name']}/{k}", "scrape_timeout": pep["scrapeTimeout"],
                     "static_configs": [{"targets": [f"{pod_ip(p)}:{tport}"],
                                         "labels": lc.meta_labels({**tpl["metadata"], "annotations": {"batch.kubernetes.io/job-completion-index": str(i)}}, p)}
                                        for i, p in enumerate(pods)],
                     "relabel_configs": lc.relabel(pep["relabelings"])})
    rules = f"{WORK}/rules-{rel}.yaml"
    yaml.safe_dump(rule["spec"], open(rules, "w"))
    return jobs, rules, pods, tpl["metadata"]["labels"]["gradex.dev/job"]


def main():
    os.makedirs(WORK, exist_ok=True)
    rendered = {rel: render(rel) for rel in RELEASES}
    clash = set(rendered["train1"]) & set(rendered["train2"])
    if clash:
        lc.fail(f"both releases render {sorted(clash)}")
    for objs in rendered.values():
        for o in (lc.one(objs, "Deployment"), lc.one(objs, "Job")):
            kp.sh("podman", "image", "exists", o["spec"]["template"]["spec"]["containers"][0]["image"])
    started = {rel: start_release(rel, rendered[rel]) for rel in RELEASES}
    print(f"played 2 releases in namespace gradex: {sum(len(o) for o in rendered.values())} objects, no name shared")
    cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
           "rule_files": [started[rel][1] for rel in RELEASES],
           "scrape_configs": [j for rel in RELEASES for j in started[rel][0]]}
    yaml.safe_dump(cfg, open(f"{WORK}/prometheus.yml", "w"))
    pport = lc.free_port()
    lc.start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                            f"--storage.tsdb.path={WORK}/prom-data", f"--web.listen-address=127.0.0.1:{pport}"])
    lc.wait_until("prometheus ready",
                  lambda: "Server is ready to receive web requests" in open(f"{WORK}/prometheus.log").read(), 30)
    for rel in RELEASES:
        job = started[rel][3]
        lc.wait_until(f"{rel}: {RANKS + 1} targets up as gradex_job={job}",
                      lambda: (r := lc.prom(pport, f'count(up{{gradex_job="{job}"}} == 1)')) and r[0]["value"][1] == str(RANKS + 1), 120)
    print(f"prometheus: {RANKS + 1} targets up for each of {[started[r][3] for r in RELEASES]}")
    for rel in RELEASES:
        for p in started[rel][2]:
            rc = kp.sh("podman", "wait", f"{p}-trainer", timeout=600)
            if rc != "0":
                lc.fail(f"{rel}: trainer pod {p} exited {rc}")
    print(f"both jobs ran to the end ({RANKS} trainer pods each, exit 0)")

    # The trainers' endpoints are gone: each release's GradexRankMissing
    # (scoped to its job) names its own job's ranks, never the other's.
    def rank_missing():
        with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/rules?type=alert", timeout=10) as r:
            groups = json.load(r)["data"]["groups"]
        per = {}
        for g in groups:
            rel = [x for x in RELEASES if g["file"].endswith(f"rules-{x}.yaml")][0]
            for rule in g["rules"]:
                if rule["name"] == "GradexRankMissing":
                    # (the members' branch, without a rank, may fire too)
                    per[rel] = sorted((a["labels"].get("gradex_job"), a["labels"].get("rank", "-")) for a in rule["alerts"])
        return per if all(len([a for a in per.get(rel, []) if a[1] != "-"]) == RANKS for rel in RELEASES) else None
    per = lc.wait_until("each release's GradexRankMissing on its own job's ranks", rank_missing, 90)
    for rel in RELEASES:
        want = sorted((started[rel][3], str(i)) for i in range(RANKS))
        if [a for a in per[rel] if a[1] != "-"] != want or any(j != started[rel][3] for j, _ in per[rel]):
            lc.fail(f"{rel}'s GradexRankMissing alerts on {per[rel]}, expected {want}")
    print("alert rules scoped: " + "; ".join(f"{rel}'s GradexRankMissing on {per[rel]}" for rel in RELEASES))
    print("PASS kube play (two releases)")


if __name__ == "__main__":
    try:
        main()
    finally:
        for path in reversed(kp.PODS):
            subprocess.run(["podman", "kube", "down", path], capture_output=True)
        for p in lc.PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
