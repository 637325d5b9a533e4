#!/usr/bin/env bash
# The fast chart checks (ctest: deploy_chart): helmrender renders helm/gradex
# for the default values and every tests/deploy/values/*.yaml (Helm's schema
# check included), the parameter servers' objects (ps_render_check.py), every
# tests/deploy/bad/*.yaml fails with the message its "# expect:" line names,
# the alert rules load and pass their promtool unit tests (the rendered
# PrometheusRule's too), the dashboards are scripts/gen-dashboards' output
# and the network board's stage panels compute on made-up series
# (stage_panels_check.py),
# and two job releases plus the dashboards release share one namespace
# without a name or uid collision (two_releases_check.py), and the job
# timing defaults are the coordinator's (chart_defaults_check.py).
# usage: chart_test.sh [OUT_DIR]  (renders are left in OUT_DIR/renders)
# Exit 77 (skip) when Go, the Go libraries, promtool or PyYAML are missing:
# scripts/install-deps installs them.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CHART=$ROOT/helm/gradex
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/gradex-chart.XXXXXX")}
mkdir -p "$OUT/renders"
fail() { echo "FAIL: $*" >&2; exit 1; }

export GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=${GOCACHE:-$OUT/gocache} GOFLAGS=
for need in go promtool; do
  command -v "$need" >/dev/null || { echo "SKIP: no $need (scripts/install-deps installs it)"; exit 77; }
done
python3 -c 'import yaml' 2>/dev/null || { echo "SKIP: no PyYAML (python3-yaml; scripts/install-deps)"; exit 77; }
for lib in github.com/Masterminds/sprig sigs.k8s.io/yaml github.com/xeipuuv/gojsonschema; do
  [[ -d /usr/share/gocode/src/$lib ]] || { echo "SKIP: no Go library $lib (scripts/install-deps)"; exit 77; }
done
(cd "$HERE/helmrender" && go build -o "$OUT/helmrender" .) || fail "helmrender does not build"
R=$OUT/helmrender

# Good value sets render.
"$R" --name gx --namespace gradex "$CHART" >"$OUT/renders/default.yaml" || fail "default values do not render"
for v in "$HERE"/values/*.yaml; do
  n=$(basename "$v" .yaml)
  "$R" --name gx --namespace gradex -f "$v" "$CHART" >"$OUT/renders/$n.yaml" || fail "values $n do not render"
done
echo "rendered: default $(cd "$HERE/values" && ls -- *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')"

# Expected objects (a template that silently renders nothing fails here).
expect_kinds() {
  local file=$1 kind
  shift
  for kind in "$@"; do
    grep -q "^kind: $kind$" "$file" || fail "$(basename "$file"): no $kind"
  done
}
expect_kinds "$OUT/renders/default.yaml" Deployment Service Secret ConfigMap NetworkPolicy Job ServiceAccount
expect_kinds "$OUT/renders/monitors.yaml" ServiceMonitor PodMonitor PrometheusRule
expect_kinds "$OUT/renders/pytorchjob.yaml" PyTorchJob
! grep -q "^kind: Secret$" "$OUT/renders/tls.yaml" || fail "tls.yaml: a token Secret although token.existingSecret is set"
grep -q -- "- --tls-cert=/etc/gradex/tls/tls.crt" "$OUT/renders/tls.yaml" || fail "tls.yaml: the coordinator has no --tls-cert"
grep -q "/usr/bin/gradex-health-probe" "$OUT/renders/tls.yaml" || fail "tls.yaml: no exec health probe under TLS"
grep -q "^ *grpc:$" "$OUT/renders/default.yaml" || fail "default: no grpc probe"
grep -q 'entry_timeout_ms\\":8000' "$OUT/renders/fault-windows.yaml" || fail "fault-windows: no entry_timeout_ms in job.json"
grep -q 'loss_settle_ms\\":0' "$OUT/renders/fault-windows.yaml" || fail "fault-windows: loss_settle_ms 0 dropped"
! grep -q 'loss_settle_ms\|entry_timeout_ms' "$OUT/renders/default.yaml" || fail "default: fault windows set although left to the coordinator"
expect_kinds "$OUT/renders/dgs-servers.yaml" StatefulSet PodMonitor NetworkPolicy
# The DGS parameter servers: only when asked; arguments, volumes, ports,
# policies, monitor and the job config's ps block.
python3 "$HERE/ps_render_check.py" "$OUT/renders" "$ROOT" || fail "parameter-server renders"
# Dashboards: once per cluster, from a dashboards-only release; none by default.
n=$(grep -c "grafana_dashboard: \"1\"" "$OUT/renders/dashboards-only.yaml")
((n == $(ls "$CHART"/dashboards/*.json | wc -l))) || fail "dashboards-only: $n dashboard ConfigMaps"
((n == $(grep -c "^kind:" "$OUT/renders/dashboards-only.yaml"))) || fail "dashboards-only: objects besides the dashboards"
! grep -q "grafana_dashboard:" "$OUT/renders/default.yaml" || fail "default: dashboards in a job release"
# One set of defaults: the chart's job timings are the coordinator's.
python3 "$HERE/chart_defaults_check.py" "$ROOT" || fail "chart defaults differ from the coordinator's"
# Ranks per pod and GPU pods: a metrics port per local rank, all scraped.
python3 "$HERE/ranks_render_check.py" "$OUT/renders" || fail "ranks per pod"
# Many jobs in one namespace: no name or uid collision, scoped monitors and rules.
python3 "$HERE/two_releases_check.py" "$R" "$CHART" "$OUT/two-releases" || fail "two releases in one namespace"

# Bad value sets fail, with the message they name.
for b in "$HERE"/bad/*.yaml; do
  want=$(sed -n 's/^# expect: //p' "$b" | head -n 1)
  [[ -n "$want" ]] || fail "$b has no '# expect:' line"
  if out=$("$R" -f "$b" "$CHART" 2>&1 >/dev/null); then
    fail "$(basename "$b") rendered, expected an error: $want"
  fi
  [[ "$out" == *"$want"* ]] || fail "$(basename "$b"): error does not say '$want': $out"
  printf 'rejected %s: %s\n' "$(basename "$b")" "$(tail -n 1 <<<"$out" | sed 's/^.*error calling fail: //' | cut -c1-150)"
done

# Alerts: the rule file and the rendered PrometheusRule load; unit tests pass.
promtool check rules "$CHART/rules/gradex-alerts.yaml" >/dev/null || fail "promtool check rules"
python3 - "$OUT/renders/monitors.yaml" "$OUT/rendered-rules.yaml" <<'PY' || fail "no PrometheusRule in the monitors render"
import json, sys
docs = open(sys.argv[1]).read().split("\n---\n")
for d in docs:
    if "\nkind: PrometheusRule\n" in "\n" + d:
        spec = d.split("\nspec:\n", 1)[1]
        open(sys.argv[2], "w").write("\n".join(l[2:] for l in spec.splitlines()) + "\n")
        break
else:
    sys.exit(1)
PY
promtool check rules "$OUT/rendered-rules.yaml" >/dev/null || fail "the rendered PrometheusRule's rules do not load"
(cd "$HERE" && promtool test rules alerts_test.yaml) || fail "promtool test rules"

# Dashboards are the generator's output.
python3 "$ROOT/scripts/gen-dashboards" "$OUT/dashboards"
diff -r "$OUT/dashboards" "$CHART/dashboards" >/dev/null ||
  fail "helm/gradex/dashboards differ from scripts/gen-dashboards' output (run it)"
# The hierarchical exchange's panels compute what they say (promtool, made-up series).
python3 "$HERE/stage_panels_check.py" "$CHART/dashboards/gradex-network.json" "$OUT/stage-panels" ||
  fail "the network dashboard's stage panels"
echo "PASS chart checks ($OUT)"
