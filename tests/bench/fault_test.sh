#!/usr/bin/env bash
# A rank process SIGKILLed inside a call (at its second send of call 3): every survivor's
# call fails with an error, the run exits non-zero, and it does so well before
# any hang bound.
set -euo pipefail
bin=$1
tls=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

algo=spardl
"$bin" --help >/dev/null
start=$(date +%s)
rc=0
UCX_TLS=$tls timeout 150 "$bin" --algo "$algo" --ranks 4 --elements 2000000 --density 0.01 \
  --iters 50 --warmup 0 --transport ucx --deadline-ms 5000 --timeout-s 120 --quiet \
  --fault-kill-rank 2 --fault-kill-at-call 3 --fault-kill-after-sends 1 >"$out" 2>&1 || rc=$?
elapsed=$(($(date +%s) - start))
cat "$out"
[[ $rc -ne 0 ]] || fail "run exited 0 although rank 2 was killed"
[[ $rc -ne 124 ]] || fail "run hung (killed by timeout)"
[[ $elapsed -lt 60 ]] || fail "took ${elapsed}s (per-call deadline is 5s)"
grep -q "rank 2 killed by signal 9" "$out" || fail "rank 2's death is not reported"
for r in 0 1 3; do
  line=$(grep -E "(FAILED: )?rank $r: " "$out" || true)
  [[ -n $line ]] || fail "survivor rank $r reported no error"
  if grep -q "no report" <<<"$line"; then fail "survivor rank $r did not report"; fi
  grep -q "$algo call 3 on rank $r" <<<"$line" || fail "rank $r did not fail inside call 3: $line"
done
echo "PASS: survivors failed cleanly in ${elapsed}s (rc=$rc)"
