#!/usr/bin/env python3
"""`podman kube play` of a rendered DGS job with the images of scripts/images
(check.sh --images, after kube_play.py): the coordinator Deployment, the
StatefulSet's server pod gx-gradex-ps-server-0 from the gradex/agent image
(non-root, read-only root, `gradex-agent --role server` with the rendered
arguments, its snapshot emptyDir) and the indexed Job's 2 trainer pods
running the DGS example (train_dgs_fashion_mnist.py --backend gradex, 40
steps each) over UCX between the pods. Then: both trainers exit 0, the
server's metrics (at its pod address, the rendered port) count exactly one
push per worker step, and SIGTERM (podman stop) leaves the shard's snapshot
in the server's volume.

The podman 4.3 adaptations are kube_pods.py's (Secret volumes as
ConfigMaps, the Service's and pod 0's DNS names as host aliases, fieldRef
and $(VAR) expansion, no containerPorts), and the server pod goes without its
checksum/job annotation (4.3 refuses a Pod's annotation values over 63
characters).

usage: kube_play_ps.py HELMRENDER CHART WORKDIR  (root; CONTAINERS_CONF set)
"""
import copy, json, os, sys, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kube_pods as kp  # noqa: E402  (playing the rendered pods)
import live_check as lc  # noqa: E402

RENDER, CHART, WORK = sys.argv[1:4]
STEPS = 40


def main():
    kp.init(WORK)
    version = yaml.safe_load(open(f"{CHART}/Chart.yaml"))["appVersion"]
    values = {"image": {"registry": "localhost"},
              "job": {"algorithm": "dgs", "worldSize": 2, "ps": {"snapshotIntervalMs": 1000}},
              "psServers": {"enabled": True, "image": {"registry": "localhost"}},
              "workload": {"replicas": 2, "image": {"registry": "localhost"},
                           "example": {"epochs": 1, "maxSteps": STEPS},
                           "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]}}
    vf = f"{WORK}/values.yaml"
    yaml.safe_dump(values, open(vf, "w"))
    docs = [d for d in yaml.safe_load_all(kp.sh(RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, CHART)) if d]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep, job = objs[("Deployment", "gx-gradex-coordinator")], objs[("Job", "gx-gradex-trainer")]
    sts = objs[("StatefulSet", "gx-gradex-ps-server")]
    token = kp.as_configmap(objs[("Secret", "gx-gradex-token")])
    for o in (dep, sts, job):
        img = o["spec"]["template"]["spec"]["containers"][0]["image"]
        if not img.endswith(f":{version}"):
            lc.fail(f"rendered image {img} is not tagged {version}")
        kp.sh("podman", "image", "exists", img)

    cpod = kp.play_coordinator("ps-coordinator", dep, [objs[("ConfigMap", "gx-gradex-job")], token],
                               "coordinator serving", deployment_name="gx-gradex-coordinator-ps")  # not kube_play.py's pod
    svc_alias = {"ip": kp.pod_ip(cpod), "hostnames": ["gx-gradex-coordinator.gradex.svc"]}

    # The server: the StatefulSet's pod 0.
    meta = copy.deepcopy(sts["spec"]["template"]["metadata"])
    meta["name"] = "gx-gradex-ps-server-0"
    # podman 4.3 refuses a Pod's annotation values over 63 characters (a
    # label's limit; Kubernetes has none for annotations): the checksum goes.
    if len(meta.get("annotations", {}).pop("checksum/job", "")) != 64:
        lc.fail("the server pod template has no checksum/job annotation")
    spec = copy.deepcopy(sts["spec"]["template"]["spec"])
    sport = spec["containers"][0]["ports"][0]["containerPort"]
    kp.adapt(spec)
    spec["hostname"], spec["hostAliases"] = meta["name"], [svc_alias]
    kp.resolve(spec["containers"][0], meta, 0)
    kp.play("ps-server", [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}, token])
    server_ctr, server_ip = f"{meta['name']}-ps-server", kp.pod_ip(meta["name"])

    # The trainers.
    names = kp.play_trainers("ps-", job, token, svc_alias, pod_name=lambda i: f"gx-gradex-trainer-ps-{i}")
    for i, p in enumerate(names):
        rc = kp.sh("podman", "wait", f"{p}-trainer", timeout=600)
        logs = kp.logs(f"{p}-trainer")
        if rc != "0":
            slog = kp.logs(server_ctr, tail=8)
            lc.fail(f"DGS trainer pod {p} exited {rc}: {logs.stderr[-800:]}\nserver: {slog.stderr[-800:]}")
        line = [l for l in (logs.stdout + logs.stderr).splitlines() if "[dgs] epoch " in l][-1:]
        print(f"DGS trainer pod {i}: exit 0{', ' + line[0][-110:] if line else ''}")
    with urllib.request.urlopen(f"http://{server_ip}:{sport}/metrics", timeout=10) as r:
        text = r.read().decode()
    pushes = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("gradex_ps_server_pushes_total"))
    if pushes != STEPS * len(names):
        lc.fail(f"the server pod counts {pushes} pushes, not {STEPS} steps x {len(names)} workers")
    print(f"server pod {meta['name']} (gradex/agent image): {pushes:.0f} pushes = {STEPS} steps x {len(names)} workers")
    kp.sh("podman", "stop", "-t", "20", server_ctr)
    state = json.loads(kp.sh("podman", "inspect", server_ctr))[0]["State"]
    vol = [m["Source"] for m in json.loads(kp.sh("podman", "inspect", server_ctr))[0]["Mounts"]
           if m["Destination"] == "/var/lib/gradex/snapshots"]
    snaps = sorted(os.listdir(vol[0])) if vol else []
    if state["ExitCode"] != 0 or snaps != ["shard-0-of-1.dgss"]:
        slog = kp.logs(server_ctr, tail=8)
        lc.fail(f"server after SIGTERM: exit {state['ExitCode']}, snapshots {snaps}: {slog.stderr[-800:]}")
    print("server pod: exit 0 on SIGTERM, snapshot shard-0-of-1.dgss in its emptyDir")
    print("PASS kube play (DGS)")


if __name__ == "__main__":
    try:
        main()
    finally:
        kp.down()
