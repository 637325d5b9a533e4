#!/usr/bin/env bash
# Under TLS the chart probes the coordinator with the image's
# gradex-health-probe (Kubernetes' grpc probe speaks plaintext only). Runs the
# coordinator with the arguments the chart renders for tests/deploy/values/tls.yaml
# (mutual TLS) and certificates made here the way cert-manager lays out a
# kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt; SAN = the Service's DNS
# name), then the rendered readiness and liveness probe commands: SERVING;
# the same probe trusting another CA: refused; the rendered example trainer's
# gradex client (GRADEX_TLS_* from its env) joins over mutual TLS.
# usage: tls_probe_check.sh BIN_DIR HELMRENDER CHART WORKDIR
set -euo pipefail
BIN=$(cd "$1" && pwd)
R=$2
CHART=$3
W=$4
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$W/tls" "$W/job" "$W/token" "$W/other"
fail() { echo "FAIL: $*" >&2; [[ -f "$W/coordinator.log" ]] && tail -n 5 "$W/coordinator.log" >&2; exit 1; }
"$R" --name gx --namespace gradex -f "$HERE/values/tls.yaml" "$CHART" >"$W/rendered.yaml"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Coordinator args, probe commands and the server name, paths mapped to $W.
python3 - "$W" "$port" <<'PY'
import json, sys, yaml
w, port = sys.argv[1], sys.argv[2]
docs = [d for d in yaml.safe_load_all(open(f"{w}/rendered.yaml")) if d]
dep = [d for d in docs if d["kind"] == "Deployment"][0]
job = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-job")][0]
c = dep["spec"]["template"]["spec"]["containers"][0]
grpc = [p["containerPort"] for p in c["ports"] if p["name"] == "grpc"][0]
m = lambda s: (s.replace("/etc/gradex/tls", f"{w}/tls").replace("/etc/gradex/job", f"{w}/job")
               .replace("/etc/gradex/token", f"{w}/token").replace(f"0.0.0.0:{grpc}", f"127.0.0.1:{port}")
               .replace(f"127.0.0.1:{grpc}", f"127.0.0.1:{port}"))
open(f"{w}/job/job.json", "w").write(job["data"]["job.json"])
open(f"{w}/coordinator.args", "w").write("\n".join(m(a) for a in c["args"] if not a.startswith("--metrics-port")) + "\n")
for kind in ("readinessProbe", "livenessProbe"):
    cmd = c[kind]["exec"]["command"]
    open(f"{w}/{kind}.cmd", "w").write("\n".join(m(a) for a in cmd) + "\n")
name = [a for a in c[ "readinessProbe"]["exec"]["command"] if a.startswith("--tls-server-name=")][0].split("=", 1)[1]
open(f"{w}/server-name", "w").write(name)
# The example trainer's environment (GRADEX_*: what its gradex client reads),
# paths mapped; the coordinator's Service name is dialled as 127.0.0.1.
tj = [d for d in docs if d["kind"] == "Job"][0]["spec"]["template"]["spec"]["containers"][0]
env = {e["name"]: e.get("value", "trainer-0") for e in tj["env"]}
env["GRADEX_COORDINATOR"] = f"127.0.0.1:{port}"
open(f"{w}/trainer.env", "w").write("".join(f"{k}={m(v)}\n" for k, v in env.items()
                                            if k.startswith("GRADEX_") and k != "GRADEX_METRICS_PORT"))
PY
name=$(cat "$W/server-name")
cd "$W"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out tls/ca.crt -days 1 -subj "/CN=gradex-test-ca" 2>/dev/null
key tls/tls.key
openssl req -new -key tls/tls.key -out server.csr -subj "/CN=$name" 2>/dev/null
printf 'subjectAltName=DNS:%s\n' "$name" >server.ext
openssl x509 -req -in server.csr -CA tls/ca.crt -CAkey ca.key -CAcreateserial -out tls/tls.crt \
  -days 1 -extfile server.ext 2>/dev/null
key other.key
openssl req -x509 -new -key other.key -out other/ca.crt -days 1 -subj "/CN=other-ca" 2>/dev/null
mkdir -p tls/client
key tls/client/tls.key
openssl req -new -key tls/client/tls.key -out client.csr -subj "/CN=trainer-0" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >client.ext
openssl x509 -req -in client.csr -CA tls/ca.crt -CAkey ca.key -CAcreateserial -out tls/client/tls.crt \
  -days 1 -extfile client.ext 2>/dev/null
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"token/token"
mapfile -t args <"$W/coordinator.args"
"$BIN/gradex-coordinator" "${args[@]}" >"$W/coordinator.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "serving on" "$W/coordinator.log" && break; sleep 0.1; done
grep -q "serving on .*mutual TLS" "$W/coordinator.log" || fail "the coordinator did not start with mutual TLS"
export PATH="$BIN:$PATH"
for kind in readinessProbe livenessProbe; do
  mapfile -t cmd <"$W/$kind.cmd"
  cmd[0]=$BIN/$(basename "${cmd[0]}")  # /usr/bin/gradex-health-probe in the image
  out=$("${cmd[@]}" 2>&1) || fail "$kind (${cmd[*]}): $out"
  [[ "$out" == *SERVING* ]] || fail "$kind: $out"
  echo "$kind (exec, mutual TLS, server name $name): $out"
done
mapfile -t cmd <"$W/readinessProbe.cmd"
cmd[0]=$BIN/gradex-health-probe
for i in "${!cmd[@]}"; do cmd[$i]=${cmd[$i]/"$W/tls/ca.crt"/"$W/other/ca.crt"}; done
if out=$("${cmd[@]}" 2>&1); then fail "a probe trusting another CA got: $out"; fi
echo "probe trusting another CA: refused ($(echo "$out" | cut -c1-100))"
# The rendered example trainer's gradex client (the Python package, from its
# environment) joins over mutual TLS with its client certificate (it then
# waits for the rest of the world: stopped here).
PYDIR=$(cd "$BIN/../python" 2>/dev/null && pwd) || fail "no $BIN/../python (the gradex Python package)"
mapfile -t tenv <"$W/trainer.env"
env "${tenv[@]}" RANK=0 WORLD_SIZE=4 PYTHONPATH="$PYDIR" /usr/bin/python3 -c \
  'import gradex; gradex.Client.create({"timeout_s": 20.0})' >"$W/trainer.log" 2>&1 &
tpid=$!
for _ in $(seq 300); do grep -q "join: member .*/r0/" "$W/coordinator.log" && break; sleep 0.1; done
kill "$tpid" 2>/dev/null || true; wait "$tpid" 2>/dev/null || true
grep -q "join: member .*/r0/" "$W/coordinator.log" ||
  fail "the rendered TLS trainer did not join: $(tail -n 3 "$W/trainer.log")"
echo "rendered trainer's gradex client joined over mutual TLS: $(grep -m1 "join: member .*/r0/" "$W/coordinator.log" | cut -d' ' -f3- | cut -c1-100)"
