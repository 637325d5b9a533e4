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
import json, os, sys, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kube_pods as kp  # noqa: E402  (playing the rendered pods, their scrape jobs)
import live_check as lc  # noqa: E402

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


def start_release(rel, objs):
    """Plays the coordinator and the trainers; returns the scrape jobs,
    the rule file, the trainer pod names and the job label."""
    dep, job = lc.one(objs, "Deployment"), lc.one(objs, "Job")
    svc = [o for (k, _), o in objs.items() if k == "Service" and o["metadata"]["name"].endswith("-coordinator")][0]
    smon, pmon, rule = lc.one(objs, "ServiceMonitor"), lc.one(objs, "PodMonitor"), lc.one(objs, "PrometheusRule")
    token = kp.as_configmap(lc.one(objs, "Secret"))
    jobcm = [o for (k, n), o in objs.items() if k == "ConfigMap" and n.endswith("-job")][0]
    cpod = kp.play_coordinator(f"{rel}-coordinator", dep, [jobcm, token], f"{rel}: coordinator serving")
    cip = kp.pod_ip(cpod)
    pods = kp.play_trainers(f"{rel}-", job, token, {"ip": cip, "hostnames": [f"{svc['metadata']['name']}.gradex.svc"]})
    jobs = kp.scrape_jobs(dep, cpod, cip, svc, smon, job, pmon, pods)
    rules = f"{WORK}/rules-{rel}.yaml"
    yaml.safe_dump(rule["spec"], open(rules, "w"))
    return jobs, rules, pods, job["spec"]["template"]["metadata"]["labels"]["gradex.dev/job"]


def main():
    kp.init(WORK)
    rendered = {rel: render(rel) for rel in RELEASES}
    clash = set(rendered["train1"]) & set(rendered["train2"])
    if clash:
        lc.fail(f"both releases render {sorted(clash)}")
    for objs in rendered.values():
        for o in (lc.one(objs, "Deployment"), lc.one(objs, "Job")):
            kp.sh("podman", "image", "exists", o["spec"]["template"]["spec"]["containers"][0]["image"])
    started = {rel: start_release(rel, rendered[rel]) for rel in RELEASES}
    print(f"played 2 releases in namespace gradex: {sum(len(o) for o in rendered.values())} objects, no name shared")
    pport = kp.start_prometheus({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                 "rule_files": [started[rel][1] for rel in RELEASES],
                                 "scrape_configs": [j for rel in RELEASES for j in started[rel][0]]})
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
        kp.down()
