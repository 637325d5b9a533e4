#!/usr/bin/env python3
"""Runs a rendered DGS job on this machine (check.sh step 5): the coordinator
with the rendered Deployment's arguments and the ps block in its job config,
the 2 parameter servers of the rendered StatefulSet (their command and
arguments, $(POD_NAME) expanded as the kubelet does, each in a UTS namespace
named as its pod, its snapshot emptyDir a directory of its own), and the 4
trainers of the rendered indexed Job running the DGS example (torchrun of
examples/train_dgs_fashion_mnist.py --backend gradex) to its step limit, with
a Prometheus scraping the coordinator and the servers through the rendered
ServiceMonitor and server PodMonitor. Then: every trainer exits 0 and none
hosted a server (the coordinator's epochs hold 2 SERVER members: the pods);
each server applied exactly one push per worker step to its shard, whose
version is its pushes (one version per push); every panel of the
parameter-server dashboard shows data; SIGTERM makes each server write its
shards' snapshots and exit 0. Kubernetes DNS names and ports are mapped to
127.0.0.1 and free ports (the pods share this host).

usage: ps_live_check.py BIN_DIR HELMRENDER CHART WORKDIR
"""
import base64, json, os, signal, subprocess, sys, time
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_check as lc  # noqa: E402  (processes, Prometheus, monitors -> scrape configs)
import live_panels  # noqa: E402

BIN, RENDER, CHART, WORK = (os.path.abspath(a) for a in sys.argv[1:5])
lc.WORK = WORK
ROUNDS = 150  # steps per worker: a full sync (every 150 versions) falls inside


def render():
    values = {
        "job": {"algorithm": "dgs", "worldSize": 4, "ps": {"snapshotIntervalMs": 1000}},
        "psServers": {"enabled": True, "replicas": 2},
        "workload": {"example": {"epochs": 1, "maxSteps": ROUNDS},
                     "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]},
        "serviceMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "podMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
    }
    vf = f"{WORK}/values.yaml"
    yaml.safe_dump(values, open(vf, "w"))
    out = subprocess.run([RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, CHART],
                         capture_output=True, text=True)
    if out.returncode:
        lc.fail(f"render: {out.stderr}")
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


def env_of(container, pod_name, index):
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = lc.expand(e["value"], env)
        elif e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            env[e["name"]] = pod_name
        else:
            env[e["name"]] = str(index)  # the completion index annotation
    return env


def in_pod(name, argv):
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name] + argv


def main():
    os.makedirs(WORK, exist_ok=True)
    objs = render()
    dep, job = objs[("Deployment", "gx-gradex-coordinator")], objs[("Job", "gx-gradex-trainer")]
    sts = objs[("StatefulSet", "gx-gradex-ps-server")]
    smon = objs[("ServiceMonitor", "gx-gradex-coordinator")]
    pmon = objs[("PodMonitor", "gx-gradex-ps-servers")]
    svc = objs[("Service", "gx-gradex-coordinator")]
    cfg = json.loads(objs[("ConfigMap", "gx-gradex-job")]["data"]["job.json"])
    os.makedirs(f"{WORK}/etc/job", exist_ok=True)
    os.makedirs(f"{WORK}/etc/token", exist_ok=True)
    open(f"{WORK}/etc/job/job.json", "w").write(json.dumps(cfg))
    for k, v in objs[("Secret", "gx-gradex-token")]["data"].items():
        open(f"{WORK}/etc/token/{k}", "wb").write(base64.b64decode(v))
    mounts = {"/etc/gradex/job": f"{WORK}/etc/job", "/etc/gradex/token": f"{WORK}/etc/token"}

    def local(s):
        for a, b in mounts.items():
            s = s.replace(a, b)
        return s

    # The coordinator, on mapped ports.
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    grpc, cmetrics = lc.free_port(), lc.free_port()
    args = [local(a).replace(f"--listen=0.0.0.0:{cports['grpc']}", f"--listen=127.0.0.1:{grpc}")
            .replace(f"--metrics-port={cports['metrics']}", f"--metrics-port={cmetrics}") for a in c["args"]]
    lc.start("coordinator", [f"{BIN}/gradex-coordinator"] + args)
    lc.wait_until("coordinator serving", lambda: "serving on" in open(f"{WORK}/coordinator.log").read(), 30)
    coordinator = f"gx-gradex-coordinator.gradex.svc:{svc['spec']['ports'][0]['port']}"

    # The servers: the StatefulSet's pods gx-gradex-ps-server-<i>.
    stpl = sts["spec"]["template"]
    sc = stpl["spec"]["containers"][0]
    sport = {p["name"]: p["containerPort"] for p in sc["ports"]}[pmon["spec"]["podMetricsEndpoints"][0]["port"]]
    snap_mount = [m["mountPath"] for m in sc["volumeMounts"] if m["name"] == "snapshots"][0]
    servers, server_ports, server_pods = [], [], []
    for i in range(sts["spec"]["replicas"]):
        name = f"{sts['metadata']['name']}-{i}"
        env = env_of(sc, name, i)
        port = lc.free_port()
        os.makedirs(f"{WORK}/snap-{i}", exist_ok=True)  # its emptyDir
        argv = [local(lc.expand(a, env)).replace(f"--coordinator={coordinator}", f"--coordinator=127.0.0.1:{grpc}")
                .replace(f"--metrics-port={sport}", f"--metrics-port={port}")
                .replace(f"--snapshot-dir={snap_mount}", f"--snapshot-dir={WORK}/snap-{i}") for a in sc["args"]]
        for want in (f"--coordinator=127.0.0.1:{grpc}", f"--metrics-port={port}", f"--agent-id={name}",
                     f"--snapshot-dir={WORK}/snap-{i}"):
            if want not in argv:
                lc.fail(f"the rendered server args are not as expected: {sc['args']}")
        if sc["command"] != ["/usr/bin/gradex-agent"]:
            lc.fail(f"the server's command is {sc['command']}, not the image's gradex-agent")
        servers.append(lc.start(f"server{i}", in_pod(name, [f"{BIN}/gradex-agent"] + argv),
                                env={**os.environ, **env}))
        server_ports.append(port)
        server_pods.append(name)

    # Prometheus: the coordinator through its ServiceMonitor, the servers
    # through theirs (the operator's scrape jobs, on mapped ports).
    if not lc.matches(pmon["spec"]["selector"], stpl["metadata"]["labels"]):
        lc.fail("the server PodMonitor does not select the server pods")
    ep, pep = smon["spec"]["endpoints"][0], pmon["spec"]["podMetricsEndpoints"][0]
    prom_cfg = {"global": {"scrape_interval": "1s"}, "scrape_configs": [
        {"job_name": "serviceMonitor/gradex/gx-gradex-coordinator/0", "scrape_timeout": ep["scrapeTimeout"],
         "static_configs": [{"targets": [f"127.0.0.1:{cmetrics}"],
                             "labels": lc.meta_labels(dep["spec"]["template"]["metadata"], "gx-gradex-coordinator-x")}],
         "relabel_configs": lc.relabel(ep["relabelings"])},
        {"job_name": "podMonitor/gradex/gx-gradex-ps-servers/0", "scrape_timeout": pep["scrapeTimeout"],
         "static_configs": [{"targets": [f"127.0.0.1:{p}"], "labels": lc.meta_labels(stpl["metadata"], n)}
                            for p, n in zip(server_ports, server_pods)],
         "relabel_configs": lc.relabel(pep["relabelings"])}]}
    yaml.safe_dump(prom_cfg, open(f"{WORK}/prometheus.yml", "w"))
    pport = lc.free_port()
    lc.start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                            f"--storage.tsdb.path={WORK}/prom-data", f"--web.listen-address=127.0.0.1:{pport}"])
    lc.wait_until("prometheus ready",
                  lambda: "Server is ready to receive web requests" in open(f"{WORK}/prometheus.log").read(), 30)
    def scraped():
        for i, p in enumerate(servers):
            if p.poll() is not None:
                lc.fail(f"server {i} exited {p.returncode}")
        r = lc.prom(pport, 'count(up{gradex_job="gx-gradex"} == 1)')
        return r and r[0]["value"][1] == "3"
    lc.wait_until("prometheus scraping the coordinator and both servers", scraped, 60)

    # The trainers: the rendered indexed Job's pods.
    t_start = time.time()
    jc = job["spec"]["template"]["spec"]["containers"][0]
    rdv = lc.listen_port()
    trainers = []
    for i in range(job["spec"]["completions"]):
        name = f"gx-gradex-trainer-{i}-x{i}"
        env = env_of(jc, name, i)
        if env.get("GRADEX_COORDINATOR") != coordinator:
            lc.fail(f"trainers' GRADEX_COORDINATOR is {env.get('GRADEX_COORDINATOR')}: rank 0 would host a server")
        env["GRADEX_COORDINATOR"] = f"127.0.0.1:{grpc}"
        env["GRADEX_TOKEN_FILE"] = local(env["GRADEX_TOKEN_FILE"])
        env["GRADEX_METRICS_PORT"] = str(lc.free_port())
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(rdv)
        argv = [lc.expand(a, env).replace("/opt/gradex/examples/", f"{lc.ROOT}/examples/")
                for a in jc["command"] + jc["args"]]
        path = {"PYTHONPATH": os.path.abspath(f"{BIN}/../python"), "TMPDIR": WORK}
        trainers.append(lc.start(f"trainer{i}", in_pod(name, argv), env={**os.environ, **env, **path}))
    script = [a for a in argv if "train_dgs_fashion_mnist.py" in a]
    if not script:
        lc.fail(f"the trainers do not run the DGS example: {jc['args']}")
    print("trainers: ..." + " ".join(script[0].split("train_dgs_fashion_mnist.py")[1].split()[:12]))
    t_mid = lc.wait_until("pushes reaching the servers",
                          lambda: (r := lc.prom(pport, 'sum(gradex_ps_server_pushes_total{gradex_job="gx-gradex"})'))
                          and float(r[0]["value"][1]) > 40 and time.time(), 300)
    end = time.time() + 400
    for i, p in enumerate(trainers):
        try:
            rc = p.wait(timeout=max(1, end - time.time()))
        except subprocess.TimeoutExpired:
            lc.fail(f"trainer {i} still running after 400 s")
        if rc:
            lc.fail(f"trainer {i} exited {rc}")
    log0 = open(f"{WORK}/trainer0.log").read()
    line = [l for l in log0.splitlines() if "[dgs] epoch 1" in l]
    if not line:
        lc.fail("rank 0 printed no epoch line")
    steps = int(line[-1].split(" steps ")[1].split()[0])
    print(f"trainers: exit 0; rank 0: {line[-1].strip()[:150]}")
    time.sleep(3)  # a last scrape
    t_end = time.time()

    # Every step pushed to both shards; one version per push; 2 SERVER members.
    q = lambda e: {r["metric"].get("shard", r["metric"].get("pod", "")): float(r["value"][1])
                   for r in lc.prom(pport, e)}
    pushes = q('sum by (pod) (gradex_ps_server_pushes_total{gradex_job="gx-gradex"})')
    versions = q('sum by (pod) (gradex_ps_server_version{gradex_job="gx-gradex"})')
    print(f"servers: pushes {pushes}, versions {versions}, worker steps {steps}")
    # Every worker step (all succeeded: the trainers exited 0) pushed once to each shard.
    if pushes != {p: float(steps) for p in server_pods}:
        lc.fail(f"pushes {pushes}: not {steps} (the worker steps) on each server pod's shard")
    if pushes != versions:
        lc.fail(f"a shard's version is not its pushes: pushes {pushes}, versions {versions}")
    members = q('gradex_coordinator_epoch_members{gradex_job="gx-gradex",role="server"}')
    if list(members.values()) != [2.0]:
        lc.fail(f"the coordinator's epoch has {members} SERVER members, expected the 2 pods")
    live_panels.check(lambda e, at: lc.prom(pport, e, at), lc.fail, CHART, WORK, cfg["job_id"], "dgs",
                      (t_start, t_mid, t_end), pport)

    # SIGTERM: a last snapshot of each server's shards, exit 0.
    for i, p in enumerate(servers):
        os.killpg(p.pid, signal.SIGTERM)
        try:
            rc = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            lc.fail(f"server {i} did not stop within 30 s of SIGTERM")
        if rc:
            lc.fail(f"server {i} exited {rc} after SIGTERM")
    snaps = sorted(f for i in range(len(servers)) for f in os.listdir(f"{WORK}/snap-{i}"))
    if snaps != ["shard-0-of-2.dgss", "shard-1-of-2.dgss"]:
        lc.fail(f"snapshots after SIGTERM: {snaps}")
    print(f"servers: exit 0 on SIGTERM; snapshots {', '.join(snaps)}")
    print("PASS ps live check")


if __name__ == "__main__":
    try:
        main()
    finally:
        for p in lc.PROCS:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
