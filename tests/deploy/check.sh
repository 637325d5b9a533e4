#!/usr/bin/env bash
# Every deployment check, the slow ones included (root; installs what it
# needs: Debian packages with apt, npm packages into a cache directory
# outside the repository, $GRADEX_NPM_DIR, default ~/.cache/gradex-deploy/npm):
#   1. chart_test.sh: renders, Helm schema, bad values, promtool rules (= ctest deploy_chart)
#   2. every render against the Kubernetes / Prometheus Operator schemas and
#      field names (validate_manifests.mjs), values.schema.json under ajv
#   3. dashboards type-check against @grafana/schema (and an unknown field fails)
#   4. the TLS exec probe: coordinator with the rendered TLS arguments and
#      openssl-made certificates, the rendered probe command answers
#   5. live_check.py: the rendered workloads, monitors and rules with a real
#      Prometheus; stall alerts; every dashboard panel shows data;
#      ps_live_check.py: a rendered DGS job, its 2 server pods' processes,
#      their PodMonitor, the parameter-server dashboard, snapshots at SIGTERM;
#      live_ranks_check.py: one pod of 4 ranks (torchrun), its 4 metrics
#      ports scraped through the PodMonitor's 4 endpoints
#   6. (--images) scripts/images from a CPU build (-DGRADEX_CUDA=OFF: the
#      images carry Debian's libraries only; $GRADEX_CPU_BUILD, default
#      build-cpu, configured here when missing): its coordinator, agent and
#      health probe binaries and the trainer's Python package, then
#      kube_play.sh: podman kube play of the rendered coordinator and trainers
#      (4 pods; then one pod of 4 ranks, its 4 metrics ports scraped);
#      kube_play_two.py: two releases in one namespace, one Prometheus,
#      each release's rules alerting on its own job only;
#      kube_play_ps.py: a DGS job's coordinator, server pod (gradex/agent) and
#      2 trainers
# usage: tests/deploy/check.sh [--skip-live] [--images] [BUILD_DIR (default build)]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LIVE=1
IMAGES=0
BUILD=$ROOT/build
while (($#)); do
  case "$1" in
    --skip-live) LIVE=0 ;;
    --images) IMAGES=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) BUILD=$(cd "$1" && pwd) ;;
  esac
  shift
done
NPM_DIR=${GRADEX_NPM_DIR:-$HOME/.cache/gradex-deploy/npm}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/gradex-deploy-check.XXXXXX")
trap '[[ -n "${KEEP_TMP:-}" ]] || rm -rf "$OUT"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "dependencies"
"$ROOT/scripts/install-deps"
need=()
for p in nodejs npm python3-yaml openssl iproute2 curl; do
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" == installed ]] || need+=("$p")
done
# nodejs/npm may come from elsewhere than Debian (then they are on PATH).
if ((${#need[@]})); then
  command -v node >/dev/null && command -v npm >/dev/null && need=("${need[@]/nodejs/}") && need=("${need[@]/npm/}")
  read -r -a need <<<"${need[*]}"
fi
if ((${#need[@]})); then
  echo "installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mkdir -p "$NPM_DIR"
if [[ ! -f "$NPM_DIR/.gradex-ok" ]]; then
  (cd "$NPM_DIR" && { [[ -f package.json ]] || echo '{"name":"gradex-deploy-checks","private":true}' >package.json; } &&
    npm install --no-audit --no-fund --silent kubernetes-models@4 @kubernetes-models/prometheus-operator \
      js-yaml@4 ajv@8 @grafana/schema typescript@5) || fail "npm install into $NPM_DIR"
  touch "$NPM_DIR/.gradex-ok"
fi
for b in gradex-coordinator gradex-agent gradex-health-probe; do
  [[ -x "$BUILD/bin/$b" ]] || fail "no $BUILD/bin/$b: build first (scripts/build)"
done
compgen -G "$BUILD/python/gradex/_C*.so" >/dev/null ||
  fail "no gradex Python module in $BUILD/python: build first (scripts/build; pybind11-dev, python3-torch)"

step "1. chart: render, Helm schema, bad values, alert rules"
"$HERE/chart_test.sh" "$OUT/chart"
R=$OUT/chart/helmrender

step "2. manifests against the Kubernetes and Prometheus Operator schemas; values under ajv"
node "$HERE/validate_manifests.mjs" "$NPM_DIR" "$OUT"/chart/renders/*.yaml
sets=()
"$R" --dump-values "$ROOT/helm/gradex" >"$OUT/values-default.json"
sets+=("good:$OUT/values-default.json")
for v in "$HERE"/values/*.yaml; do
  "$R" --dump-values -f "$v" "$ROOT/helm/gradex" >"$OUT/values-$(basename "$v" .yaml).json"
  sets+=("good:$OUT/values-$(basename "$v" .yaml).json")
done
for b in "$HERE"/bad/*.yaml; do
  # The cross-field checks (world size, teams, TLS secret) are the templates'.
  grep -q "^# checked by: the templates" "$b" && continue
  "$R" --dump-values -f "$b" "$ROOT/helm/gradex" >"$OUT/bad-$(basename "$b" .yaml).json"
  sets+=("bad:$OUT/bad-$(basename "$b" .yaml).json")
done
node "$HERE/check_values_schema.mjs" "$NPM_DIR" "$ROOT/helm/gradex/values.schema.json" "${sets[@]}"

step "3. dashboards against @grafana/schema"
python3 "$HERE/typecheck_dashboards.py" "$NPM_DIR" "$ROOT"/helm/gradex/dashboards/*.json
python3 - "$ROOT/helm/gradex/dashboards/gradex-network.json" "$OUT/broken-dashboard.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["panels"][0]["gridPoss"] = d["panels"][0].pop("gridPos")  # a misspelt field
json.dump(d, open(sys.argv[2], "w"))
PY
if python3 "$HERE/typecheck_dashboards.py" "$NPM_DIR" "$OUT/broken-dashboard.json" 2>/dev/null; then
  fail "a dashboard with an unknown field type-checked"
fi
echo "a misspelt panel field fails the type check"

step "4. the TLS exec probe"
"$HERE/tls_probe_check.sh" "$BUILD/bin" "$R" "$ROOT/helm/gradex" "$OUT/tls"

if ((LIVE)); then
  step "5. live: rendered workloads, monitors, rules, dashboards"
  python3 "$HERE/live_check.py" "$BUILD/bin" "$R" "$ROOT/helm/gradex" "$OUT/live" |
    grep -v '^step \|^\[' || fail "live check"
  step "5b. live: a rendered DGS job with its parameter servers, their monitor and dashboard"
  python3 "$HERE/ps_live_check.py" "$BUILD/bin" "$R" "$ROOT/helm/gradex" "$OUT/ps-live" || fail "ps live check"
  step "5c. live: one pod of 4 ranks, each rank's metrics port scraped through the PodMonitor"
  python3 "$HERE/live_ranks_check.py" "$BUILD/bin" "$R" "$ROOT/helm/gradex" "$OUT/ranks-live" || fail "ranks live check"
fi
if ((IMAGES)); then
  step "6. images and podman kube play"
  # A CPU build for the images (Debian's torch has no CUDA; the agent image
  # has no CUDA runtime): $BUILD may be a CUDA build (GRADEX_CUDA=AUTO finds
  # nvcc). Inside the repository, where .containerignore lets its binaries in.
  CPU=${GRADEX_CPU_BUILD:-$ROOT/build-cpu}
  if [[ ! -f "$CPU/CMakeCache.txt" ]]; then
    CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache cmake -S "$ROOT" -B "$CPU" \
      -DCMAKE_BUILD_TYPE=Release -DGRADEX_CUDA=OFF >/dev/null
  fi
  nice -n 5 cmake --build "$CPU" -j2 --target gradex_python gradex-coordinator gradex-agent \
    gradex-health-probe >/dev/null || fail "the CPU build ($CPU) of the images' binaries and Python module"
  nice -n 10 "$ROOT/scripts/images" --prebuilt "$CPU/bin" --python-build "$CPU"
  "$HERE/kube_play.sh" "$R" "$ROOT/helm/gradex" "$OUT/kube"
  "$HERE/kube_play.sh" "$R" "$ROOT/helm/gradex" "$OUT/kube-ranks" --nproc 4
  CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/containers.conf} \
    python3 "$HERE/kube_play_two.py" "$R" "$ROOT/helm/gradex" "$OUT/kube-two"
  CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/containers.conf} \
    python3 "$HERE/kube_play_ps.py" "$R" "$ROOT/helm/gradex" "$OUT/kube-ps"
fi
echo "PASS deploy checks"
