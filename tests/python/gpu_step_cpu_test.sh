#!/usr/bin/env bash
# bench/gpu_step/run.sh on CPU tensors (no GPU, no tc): DDP and gradex's hook,
# 4 ranks under torchrun, a small model, 2 timed steps. Checks the plumbing,
# not the times: every run finished, summary.json has a row per mode with the
# steps asked for, a ratio to DDP, gradex's PCIe bytes (0: host tensors take
# no device path) and its timeline phases; --no-tc drops the limited rates;
# bad arguments are refused. Skips (77) where PYTHON has no torch.
# Usage: gpu_step_cpu_test.sh PYTHON BUILD_DIR
set -euo pipefail
py=$1 build=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
run=$root/bench/gpu_step/run.sh
"$py" -c 'import torch' 2>/dev/null || { echo "SKIP: $py has no torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$run" --help | grep -q -- '--no-tc' || fail "--help does not describe --no-tc"
for bad in "--device tpu" "--modes nope" "--rates 3furlongs" "--steps 0" "--bogus"; do
  # shellcheck disable=SC2086
  if "$run" $bad --out "$tmp/bad" 2>"$tmp/err"; then fail "accepted $bad"; fi
  grep -q 'gpu_step:' "$tmp/err" || fail "$bad: no clear error: $(cat "$tmp/err")"
done

"$run" --device cpu --python "$py" --build-dir "$build" --modes ddp,gradex:spardl \
  --rates unlimited,1gbit --no-tc --steps 2 --warmup 1 --out "$tmp/out" >"$tmp/log" 2>&1 ||
  { cat "$tmp/log"; fail "run.sh failed"; }
grep -q -- '--no-tc: only the unlimited rate runs' "$tmp/log" || fail "--no-tc kept a limited rate"
"$py" - "$tmp/out/summary.json" <<'EOF' || { cat "$tmp/log"; exit 1; }
import json, sys
s = json.load(open(sys.argv[1]))
rows = {(r["rate"], r["mode"]): r for r in s["results"]}
assert set(rows) == {("unlimited", "ddp"), ("unlimited", "gradex:spardl")}, rows.keys()
assert s["meta"]["device"] == "cpu" and s["meta"]["ranks"] == "4", s["meta"]
for r in rows.values():
    assert r["steps"] == 2 and r["median_step_ms"] > 0 and r["vs_ddp"] > 0, r
g = rows[("unlimited", "gradex:spardl")]
assert g["pcie_bytes_per_step"] == {"device_to_host": 0, "host_to_device": 0}, g
assert g["device_paths"] == ["host"], g
assert all(g["phases_ms_per_step"][p] is not None for p in
           ("selection", "communication", "reduction")), g
assert g["phases_ms_per_step"]["communication"] > 0, g
assert g["buckets"] and all(b.startswith("spardl:") for b in g["buckets"]), g
print("ok:", {k: round(v["median_step_ms"], 1) for k, v in rows.items()})
EOF
