#!/usr/bin/env python3
"""Many jobs in one cluster: two job releases and the once-per-cluster
dashboards release rendered into one namespace share no object name and no
dashboard uid; each release's monitors select only its own job's pods; each
PrometheusRule selects only its own job's series (every selector of every
expr carries gradex_job="<its job>"); runbook links are absolute URLs from
alerts.runbookBaseUrl; and a second release that enables the dashboards
renders the same ConfigMap names as the first, so that Helm refuses it at
install instead of shipping the same uids twice.
usage: two_releases_check.py HELMRENDER CHART WORKDIR"""
import json
import os
import re
import subprocess
import sys

import yaml

RENDER, CHART, WORK = sys.argv[1:4]
NS = "ml"
DEFAULT_RUNBOOKS = "https://github.com/gradex-project/gradex/blob/main/docs/operations.md"


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def render(name, values):
    vf = os.path.join(WORK, f"{name}-values.yaml")
    with open(vf, "w") as f:
        yaml.safe_dump(values, f)
    out = subprocess.run([RENDER, "--name", name, "--namespace", NS, "-f", vf, CHART],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        fail(f"release {name} does not render: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def key(d):
    return (d["kind"], d["metadata"].get("namespace", NS), d["metadata"]["name"])


def uids(docs):
    found = []
    for d in docs:
        if d["kind"] == "ConfigMap":
            for k, v in d.get("data", {}).items():
                if k.endswith(".json") and '"uid"' in v and '"panels"' in v:
                    found.append(json.loads(v)["uid"])
    return found


def one(docs, kind):
    found = [d for d in docs if d["kind"] == kind]
    if len(found) != 1:
        fail(f"expected one {kind}, found {len(found)}")
    return found[0]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


# A selector: a metric name and its braces (label names inside by (...) and
# on (...) are not followed by braces, and "gradex_job" itself is a label).
SELECTOR = re.compile(r"\b(up|gradex_[a-z0-9_]+)\b(\{[^}]*\})?")


def check_rules(rule, job, base):
    for g in rule["spec"]["groups"]:
        for r in g["rules"]:
            for m in SELECTOR.finditer(r["expr"]):
                name, braces = m.group(1), m.group(2)
                if name == "gradex_job":
                    continue
                if not braces or f'gradex_job="{job}"' not in braces:
                    fail(f"{rule['metadata']['name']}: {r['alert']}: selector {m.group(0)} "
                         f"is not scoped to job {job}")
            if 'gradex_job!=""' in r["expr"]:
                fail(f"{r['alert']}: the placeholder matcher was not replaced")
            url = r["annotations"]["runbook_url"]
            if url != f"{base}#{r['alert'].lower()}":
                fail(f"{r['alert']}: runbook_url {url}, expected {base}#{r['alert'].lower()}")


def main():
    os.makedirs(WORK, exist_ok=True)
    monitors = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
                "prometheusRule": {"enabled": True}}
    a = render("train1", monitors)
    b = render("train2", {**monitors, "alerts": {"runbookBaseUrl": "https://wiki.example.com/gradex/runbooks/"}})
    dash = render("gradex-dashboards", {"dashboards": {"only": True}})
    if {d["kind"] for d in dash} != {"ConfigMap"} or not uids(dash):
        fail(f"the dashboards release renders {sorted({d['kind'] for d in dash})}, expected only dashboard ConfigMaps")
    if uids(a) or uids(b):
        fail("a job release with default values ships dashboards")
    seen = {}
    for rel, docs in (("train1", a), ("train2", b), ("gradex-dashboards", dash)):
        for d in docs:
            k = key(d)
            if k in seen:
                fail(f"{k} rendered by both {seen[k]} and {rel}")
            seen[k] = rel
    all_uids = uids(a) + uids(b) + uids(dash)
    if len(set(all_uids)) != len(all_uids):
        fail(f"dashboard uids repeat: {sorted(all_uids)}")
    print(f"3 releases in namespace {NS}: {len(seen)} objects, no name collision; "
          f"{len(all_uids)} dashboard uids, each once")

    # Each release's monitors and rules see its own job only.
    jobs = {}
    for rel, docs in (("train1", a), ("train2", b)):
        pod = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
        jobs[rel] = (pod["gradex.dev/job"], pod, docs)
    for rel, (job, _, docs) in jobs.items():
        pm = [d for d in docs if d["kind"] == "PodMonitor"]
        for other, (ojob, opod, _) in jobs.items():
            sel = matches(pm[0]["spec"]["selector"], opod)
            if sel != (other == rel):
                fail(f"the PodMonitor of {rel} {'selects' if sel else 'misses'} the trainers of {other}")
        base = DEFAULT_RUNBOOKS if rel == "train1" else "https://wiki.example.com/gradex/runbooks"
        check_rules(one(docs, "PrometheusRule"), job, base)
    print(f"monitors and alert rules scoped: train1 -> {jobs['train1'][0]}, train2 -> {jobs['train2'][0]}; "
          "runbook_url absolute, from alerts.runbookBaseUrl")

    # Dashboards enabled in two releases: the same ConfigMap names (Helm
    # refuses the second install: the objects belong to the first release).
    d1 = render("train3", {"dashboards": {"enabled": True}})
    d2 = render("train4", {"dashboards": {"enabled": True}})
    n1 = {key(d) for d in d1 if d["kind"] == "ConfigMap" and uids([d])}
    n2 = {key(d) for d in d2 if d["kind"] == "ConfigMap" and uids([d])}
    if not n1 or n1 != n2:
        fail(f"dashboard ConfigMaps of two releases are not the same objects: {sorted(n1 ^ n2)}")
    print(f"dashboards enabled in two releases: the same {len(n1)} ConfigMap names (the second install fails)")
    print("PASS two releases")


if __name__ == "__main__":
    main()
