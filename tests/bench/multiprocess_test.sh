#!/usr/bin/env bash
# 4 rank processes over UCX (UCX_TLS=$2) give bitwise the same inputs,
# residuals and results as 4 loopback threads with the same seed, for every
# registered algorithm, and every invariant holds.
set -euo pipefail
bin=$1
tls=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

common=(--algo all --ranks 4 --elements 200003 --density 0.01 --iters 2 --warmup 1 --seed 7
  --deadline-ms 30000 --timeout-s 240 --quiet --json)
"$bin" "${common[@]}" --transport loopback --dump "$tmp/loopback" >"$tmp/loopback.jsonl" ||
  fail "loopback run exited $?"
UCX_TLS=$tls "$bin" "${common[@]}" --transport ucx --dump "$tmp/ucx" >"$tmp/ucx.jsonl" ||
  fail "UCX_TLS=$tls run exited $?"
cat "$tmp/ucx.jsonl"

for f in "$tmp"/loopback.jsonl "$tmp"/ucx.jsonl; do
  [[ -s $f ]] || fail "$f is empty"
  if grep -q '"consistent":false' "$f"; then fail "inconsistent result in $f"; fi
done
[[ $(wc -l <"$tmp/loopback.jsonl") -eq $(wc -l <"$tmp/ucx.jsonl") ]] ||
  fail "different numbers of algorithms ran"

n=0
while IFS= read -r -d '' f; do
  rel=${f#"$tmp/loopback/"}
  [[ -f "$tmp/ucx/$rel" ]] || fail "UCX run did not write $rel"
  cmp -s "$f" "$tmp/ucx/$rel" || fail "$rel differs between loopback and UCX_TLS=$tls"
  [[ $(stat -c %s "$f") -eq $((200003 * 4)) ]] || fail "$rel has the wrong size"
  n=$((n + 1))
done < <(find "$tmp/loopback" -name '*.f32' -print0)
[[ $n -ge 16 ]] || fail "only $n dump files"
echo "PASS: $n dump files bitwise equal (UCX_TLS=$tls vs loopback)"
