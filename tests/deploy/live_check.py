#!/usr/bin/env python3
"""Runs what the chart renders, on this machine: the coordinator with the
rendered Deployment's arguments, job config and token, its readiness probe
(grpc.health.v1 Check, as the kubelet sends it, by gradex-health-probe), the
4 trainers of the rendered indexed Job (their command, arguments and env,
$(VAR)s expanded as the kubelet does; the example gradex-agent), and a
Prometheus whose scrape jobs are made from the rendered ServiceMonitor and
PodMonitor the way Prometheus Operator makes them (selectors matched against
the rendered objects, named ports resolved, the monitors' relabelings) with
the rendered PrometheusRule loaded. The trainers are the chart's example:
torchrun of examples/train_fashion_mnist.py through gradex's DDP hook (the
package from BIN_DIR/../python), one per "pod", each in its own UTS
namespace with the pod's hostname (so the coordinator's ranks and hosts are
the pods'), trained to the end. Rank 2 sleeps 20 s before a step (the
example's --stall-*, a trainer stuck in its own compute); then: the
coordinator blames it, the stall alerts fire naming rank 2 and its host,
every dashboard panel's query returns data, and every trainer has a UCX
listener in the rendered UCX_TCP_PORT_RANGE. Kubernetes DNS names and ports
are mapped to 127.0.0.1 and free ports (4 pods share this host).

usage: live_check.py BIN_DIR HELMRENDER CHART WORKDIR
"""
import base64, json, os, random, re, signal, socket, subprocess, sys, time, urllib.parse, urllib.request
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import live_panels  # noqa: E402

BIN = RENDER = CHART = WORK = None  # set from argv (kube_play.py imports the helpers)
PROCS = []
# Late enough that Prometheus has scraped every trainer before it (a counter
# whose first sample is already 1 shows no increase()). The step deadline
# (30 s) outlasts the stall: the waits are diagnosed at half of it, no step
# fails, the run completes.
STALL_RANK, STALL_STEP, STALL_MS = 2, 120, 20000
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    for f in sorted(os.listdir(WORK)):
        if f.endswith(".log"):
            lines = open(os.path.join(WORK, f), errors="replace").readlines()
            errors = [l for l in lines[:-8] if "Error" in l][-3:]  # a trainer's Python exception
            print(f"--- {f} ({'its errors and ' if errors else ''}last 8 lines)", file=sys.stderr)
            print("".join(errors + lines[-8:]), file=sys.stderr)
    sys.exit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listen_port():
    """A port free on every address below the ephemeral range (32768-60999 on
    Linux): what a trainer binds only after seconds of imports (the
    rendezvous store, the metrics endpoint on 0.0.0.0) must not be taken in
    the meantime by some process's outgoing connection."""
    for _ in range(200):
        p = random.randrange(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", p))
            return p
        except OSError:
            continue
        finally:
            s.close()
    fail("no free port in 20000-31999")


def start(name, argv, env=None):
    log = open(os.path.join(WORK, f"{name}.log"), "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    PROCS.append(p)
    return p


def wait_until(what, pred, limit):
    end = time.time() + limit
    while time.time() < end:
        r = pred()
        if r:
            return r
        time.sleep(0.5)
    fail(f"{what} (not within {limit} s)")


def prom(port, query, at=None):
    q = {"query": query}
    if at:
        q["time"] = f"{at:.3f}"
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(q)
    with urllib.request.urlopen(url, timeout=10) as r:
        d = json.load(r)
    if d["status"] != "success":
        fail(f"query failed: {query}: {d}")
    return d["data"]["result"]


def render():
    values = {
        "job": {"worldSize": 4, "teams": 2, "stepDeadlineMs": 30000, "leaseMs": 3000,
                "extraConfig": {"plan_lead_steps": 16}},
        "workload": {"example": {"epochs": 1, "maxSteps": 0},
                     "extraEnv": [{"name": "UCX_TLS", "value": "tcp"}]},
        "serviceMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "podMonitor": {"enabled": True, "interval": "1s", "scrapeTimeout": "900ms"},
        "prometheusRule": {"enabled": True, "for": "5s"},
    }
    vf = os.path.join(WORK, "values.yaml")
    with open(vf, "w") as f:
        yaml.safe_dump(values, f)
    out = subprocess.run([RENDER, "--name", "gx", "--namespace", "gradex", "-f", vf, CHART],
                         capture_output=True, text=True, check=False)
    if out.returncode:
        fail(f"render: {out.stderr}")
    open(os.path.join(WORK, "rendered.yaml"), "w").write(out.stdout)
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def one(objs, kind):
    found = [o for (k, _), o in objs.items() if k == kind]
    if len(found) != 1:
        fail(f"expected one {kind}, rendered {len(found)}")
    return found[0]


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def meta_labels(pod_meta, name):
    def clean(k):
        return re.sub(r"[^a-zA-Z0-9_]", "_", k)
    m = {f"__meta_kubernetes_pod_label_{clean(k)}": v for k, v in pod_meta.get("labels", {}).items()}
    m.update({f"__meta_kubernetes_pod_annotation_{clean(k)}": v
              for k, v in pod_meta.get("annotations", {}).items()})
    m["__meta_kubernetes_pod_name"] = name
    return m


def relabel(rules):
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [{keys.get(k, k): v for k, v in r.items()} for r in rules]


def expand(s, env):
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), s)


def main():
    os.makedirs(WORK, exist_ok=True)
    objs = render()
    dep = one(objs, "Deployment")
    job = one(objs, "Job")
    svc = objs[("Service", "gx-gradex-coordinator")]
    smon, pmon, rule = one(objs, "ServiceMonitor"), one(objs, "PodMonitor"), one(objs, "PrometheusRule")
    token_secret = one(objs, "Secret")
    job_cm = objs[("ConfigMap", "gx-gradex-job")]
    ns = "gradex"

    # Files the pods mount.
    os.makedirs(f"{WORK}/etc/job", exist_ok=True)
    os.makedirs(f"{WORK}/etc/token", exist_ok=True)
    open(f"{WORK}/etc/job/job.json", "w").write(job_cm["data"]["job.json"])
    for k, v in token_secret["data"].items():
        open(f"{WORK}/etc/token/{k}", "wb").write(base64.b64decode(v))
    mounts = {"/etc/gradex/job": f"{WORK}/etc/job", "/etc/gradex/token": f"{WORK}/etc/token"}

    def local_path(s):
        for a, b in mounts.items():
            s = s.replace(a, b)
        return s

    # The coordinator, on mapped ports.
    c = dep["spec"]["template"]["spec"]["containers"][0]
    cports = {p["name"]: p["containerPort"] for p in c["ports"]}
    grpc_port, metrics_port = free_port(), free_port()
    args = []
    for a in c["args"]:
        a = local_path(a)
        a = a.replace(f"--listen=0.0.0.0:{cports['grpc']}", f"--listen=127.0.0.1:{grpc_port}")
        a = a.replace(f"--metrics-port={cports['metrics']}", f"--metrics-port={metrics_port}")
        args.append(a)
    if f"--listen=127.0.0.1:{grpc_port}" not in args or f"--metrics-port={metrics_port}" not in args:
        fail(f"the rendered coordinator args are not as expected: {c['args']}")
    start("coordinator", [f"{BIN}/gradex-coordinator"] + args)
    wait_until("coordinator serving", lambda: "serving on" in open(f"{WORK}/coordinator.log").read(), 30)

    # Its probes: Kubernetes' grpc probe = Health/Check for service "" on the port.
    for kind in ("readinessProbe", "livenessProbe"):
        pr = c[kind]
        if pr.get("grpc", {}).get("port") != cports["grpc"]:
            fail(f"{kind} is not a grpc probe on the grpc port: {pr}")
        r = subprocess.run([f"{BIN}/gradex-health-probe", f"--addr=127.0.0.1:{grpc_port}",
                            f"--timeout-ms={pr['timeoutSeconds'] * 1000}"], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{kind}: {r.stdout}{r.stderr}")
        print(f"{kind}: {r.stdout.strip()}")

    # Prometheus from the monitors (what the operator generates, on mapped ports).
    pod_tpl = dep["spec"]["template"]
    if not matches(smon["spec"]["selector"], svc["metadata"]["labels"]):
        fail("the ServiceMonitor does not select the coordinator Service")
    if not matches({"matchLabels": svc["spec"]["selector"]}, pod_tpl["metadata"]["labels"]):
        fail("the coordinator Service does not select the coordinator pods")
    ep = smon["spec"]["endpoints"][0]
    sport = [p for p in svc["spec"]["ports"] if p["name"] == ep["port"]]
    if not sport or sport[0]["targetPort"] not in cports:
        fail(f"ServiceMonitor port {ep['port']} does not resolve to a coordinator container port")
    coord_labels = meta_labels(pod_tpl["metadata"], "gx-gradex-coordinator-abc12")
    jpod = job["spec"]["template"]
    jc = jpod["spec"]["containers"][0]
    if not matches(pmon["spec"]["selector"], jpod["metadata"]["labels"]):
        fail("the PodMonitor does not select the trainer pods")
    pep = pmon["spec"]["podMetricsEndpoints"][0]
    tports = {p["name"]: p["containerPort"] for p in jc["ports"]}
    if pep["port"] not in tports:
        fail(f"PodMonitor port {pep['port']} is not a trainer container port")
    n = job["spec"]["completions"]
    agent_ports = [listen_port() for _ in range(n)]
    pods = []
    for i in range(n):
        meta = dict(jpod["metadata"])
        meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        pods.append((f"gx-gradex-trainer-{i}-x{i}", meta))
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": [
            {"job_name": f"serviceMonitor/{ns}/{smon['metadata']['name']}/0",
             "scrape_interval": ep["interval"], "scrape_timeout": ep["scrapeTimeout"],
             "metrics_path": ep.get("path", "/metrics"),
             "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"], "labels": coord_labels}],
             "relabel_configs": relabel(ep.get("relabelings", []))},
            {"job_name": f"podMonitor/{ns}/{pmon['metadata']['name']}/0",
             "scrape_interval": pep["interval"], "scrape_timeout": pep["scrapeTimeout"],
             "metrics_path": pep.get("path", "/metrics"),
             "static_configs": [{"targets": [f"127.0.0.1:{agent_ports[i]}"], "labels": meta_labels(m, name)}
                                for i, (name, m) in enumerate(pods)],
             "relabel_configs": relabel(pep.get("relabelings", []))},
        ],
    }
    with open(f"{WORK}/prometheus.yml", "w") as f:
        yaml.safe_dump(cfg, f)
    with open(f"{WORK}/rules.yaml", "w") as f:
        yaml.safe_dump(rule["spec"], f)
    pport = free_port()
    start("prometheus", ["prometheus", f"--config.file={WORK}/prometheus.yml",
                         f"--storage.tsdb.path={WORK}/prom-data", f"--web.listen-address=127.0.0.1:{pport}"])
    wait_until("prometheus ready",
               lambda: "Server is ready to receive web requests" in open(f"{WORK}/prometheus.log").read(), 30)

    # The stall's counters must have a first sample before it (see STALL_STEP).
    wait_until("prometheus scraping the coordinator",
               lambda: prom(pport, 'up{gradex_component="coordinator"} == 1'), 60)

    # The trainers: the rendered container, $(VAR)s expanded as the kubelet
    # does, each in a UTS namespace named as its pod.
    t_start = time.time()
    jobid = json.loads(job_cm["data"]["job.json"])["job_id"]
    rdv_port = listen_port()
    agents = []
    for i, (name, meta) in enumerate(pods):
        env = {}
        for e in jc["env"]:
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
            elif e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
                env[e["name"]] = name
            else:
                env[e["name"]] = str(i)  # the completion index annotation
        env["GRADEX_COORDINATOR"] = f"127.0.0.1:{grpc_port}"  # the Service's DNS name, here
        env["GRADEX_TOKEN_FILE"] = local_path(env["GRADEX_TOKEN_FILE"])
        if env["GRADEX_METRICS_PORT"] != str(tports[pep["port"]]):
            fail(f"GRADEX_METRICS_PORT {env['GRADEX_METRICS_PORT']} is not the PodMonitor's port")
        env["GRADEX_METRICS_PORT"] = str(agent_ports[i])
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(rdv_port)  # pod 0's DNS name
        argv = [expand(a, env) for a in jc["command"] + jc["args"]]
        # The image's example and package; here the repository's and the build's.
        argv = [a.replace("/opt/gradex/examples/", f"{ROOT}/examples/") for a in argv]
        if i == STALL_RANK:
            argv += [f"--stall-at-step={STALL_STEP}", f"--stall-s={STALL_MS / 1000:g}"]
        path = {"PYTHONPATH": os.path.abspath(f"{BIN}/../python"), "TMPDIR": f"{WORK}"}
        uts = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name]
        agents.append(start(f"trainer{i}", uts + argv, env={**os.environ, **env, **path}))
    print(f"trainers: {' '.join(argv[:3])[:160]} ... (rank {STALL_RANK} sleeps {STALL_MS} ms before step {STALL_STEP})")

    # A client with a wrong token (auth failure and RPC error panels).
    bad = f"{WORK}/bad-token"
    open(bad, "w").write("not-the-job-token-0123456789")
    subprocess.run([f"{BIN}/gradex-agent", f"--coordinator=127.0.0.1:{grpc_port}", f"--job={jobid}", f"--token-file={bad}",
                    "--elements=1000", "--steps=1", "--join-timeout-s=5"], capture_output=True, timeout=60)

    want = n + 1
    wait_until(f"prometheus scraping {want} targets through the monitors",
               lambda: prom(pport, f'count(up{{gradex_job="{jobid}"}} == 1)') and
               prom(pport, f'count(up{{gradex_job="{jobid}"}} == 1)')[0]["value"][1] == str(want), 90)
    ranks = sorted(r["metric"].get("rank") for r in prom(pport, f'up{{gradex_component="trainer"}}'))
    if ranks != [str(i) for i in range(n)]:
        fail(f"trainer targets' rank labels are {ranks}")
    print(f"prometheus: {want} targets up via the rendered ServiceMonitor/PodMonitor, ranks {ranks}")

    # Every trainer (its process group: sh, torchrun, python) has a UCX
    # listener inside the rendered port range (gloo's and torchrun's are
    # elsewhere: the NetworkPolicy's trainerAllPorts).
    lo, hi = map(int, env["UCX_TCP_PORT_RANGE"].split("-"))
    def group_pids(pgid):
        out = set()
        for d in os.listdir("/proc"):
            try:
                if d.isdigit() and os.getpgid(int(d)) == pgid:
                    out.add(int(d))
            except OSError:
                pass
        return out
    def listeners():
        ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True).stdout
        per = []
        for a in agents:
            pids = group_pids(a.pid)
            per.append(sorted({int(m.group(1)) for line in ss.splitlines()
                               if any(f"pid={p}," in line for p in pids)
                               for m in [re.search(r":(\d+)\s", line)] if m}))
        return per if all(any(lo <= p <= hi for p in ports) for ports in per) else None
    per = wait_until(f"a UCX listener in {lo}-{hi} in every trainer", listeners, 120)
    print(f"UCX listeners in {lo}-{hi}: {[[p for p in ports if lo <= p <= hi] for ports in per]}")

    # The stall: the alerts fire and name rank 2.
    wait_until("the coordinator diagnosing the stall",
               lambda: "stalled" in open(f"{WORK}/coordinator.log").read(), 90)
    t_stall = wait_until("GradexRankStalled firing",
                         lambda: prom(pport, 'ALERTS{alertname="GradexRankStalled",alertstate="firing"}') and time.time(), 60)
    fired = prom(pport, 'ALERTS{alertname="GradexRankStalled",alertstate="firing"}')
    named = [(a["metric"].get("rank"), a["metric"].get("host")) for a in fired]
    if named != [(str(STALL_RANK), pods[STALL_RANK][0])]:
        fail(f"GradexRankStalled names {named}, expected rank {STALL_RANK} on {pods[STALL_RANK][0]}")
    wait_until("GradexJobStalled firing",
               lambda: prom(pport, 'ALERTS{alertname="GradexJobStalled",alertstate="firing"}'), 30)
    line = [l for l in open(f"{WORK}/coordinator.log") if "stalled" in l][0].strip()
    print(f"alerts firing: GradexRankStalled{{rank=\"{STALL_RANK}\",host=\"{pods[STALL_RANK][0]}\"}}, GradexJobStalled; coordinator: {line[25:200]}")

    for i, a in enumerate(agents):
        try:
            rc = a.wait(timeout=600)
        except subprocess.TimeoutExpired:
            fail(f"trainer {i} still running after 600 s")
        if rc != 0:
            fail(f"trainer {i} exited with {rc}")
    t_end = time.time() - 2
    last = [l.strip() for l in open(f"{WORK}/trainer0.log") if "] epoch " in l or "test_acc" in l][-1:]
    print(f"trainers finished: {n} ranks, {time.time() - t_start:.0f} s; rank 0: {last[0][-110:] if last else '(no epoch line)'}")

    # Every panel's query returns data at the stall or near the end of the run.
    algorithm = json.loads(job_cm["data"]["job.json"]).get("algorithm")
    live_panels.check(lambda q, at: prom(pport, q, at), fail, CHART, WORK, jobid, algorithm,
                      (t_start, t_stall, t_end), pport)
    if os.environ.get("LIVE_KEEP_PROMETHEUS"):
        print(f"prometheus left running on port {pport} (LIVE_KEEP_PROMETHEUS)")
        return
    print("PASS live check")


if __name__ == "__main__":
    BIN, RENDER, CHART, WORK = sys.argv[1:5]
    try:
        main()
    finally:
        keep = os.environ.get("LIVE_KEEP_PROMETHEUS")
        for p in PROCS:
            if p.poll() is None and not (keep and p.args[0] == "prometheus"):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
