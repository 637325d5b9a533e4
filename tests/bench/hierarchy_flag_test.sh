#!/usr/bin/env bash
# gradex-bench --ranks-per-node: 4 loopback ranks as 2 nodes x 2 run the
# hierarchical exchange (the table names the layout and both stages), keep
# every invariant, and send across nodes at most 1.25x what one rank of the
# flat one-rank-per-node job (2 ranks) sends; --hierarchy off runs flat.
set -euo pipefail
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$2"; }

common=(--transport loopback --algo spardl-bsag --elements 100003 --density 0.01 --iters 3
  --warmup 1 --seed 3 --deadline-ms 20000 --quiet)

table=$("$bin" "${common[@]}" --ranks 4 --ranks-per-node 2) || fail "hierarchical run exited $?"
echo "$table"
grep -q '^layout: 2 nodes x 2 ranks' <<<"$table" || fail "no layout line"
grep -qE '^spardl-bsag +hierarchical: intra-node sent [0-9.]+ MB' <<<"$table" ||
  fail "no hierarchical line for spardl-bsag"
grep -qE '^spardl-bsag .* yes ' <<<"$table" || fail "invariants do not hold"

hier=$("$bin" "${common[@]}" --ranks 4 --ranks-per-node 2 --json) || fail "json run exited $?"
ref=$("$bin" "${common[@]}" --ranks 2 --json) || fail "reference run exited $?"
off=$("$bin" "${common[@]}" --ranks 4 --ranks-per-node 2 --hierarchy off --json) ||
  fail "--hierarchy off run exited $?"
echo "$hier"
echo "$ref"
for j in "$hier" "$ref" "$off"; do
  [[ $(field consistent "$j") == true ]] || fail "inconsistent: $j"
done
[[ $(field hierarchy_nodes "$hier") == 2 && $(field hierarchy_ranks_per_node "$hier") == 2 ]] ||
  fail "details do not say 2 nodes x 2 ranks"
if grep -q intra_node_sent_bytes <<<"$off"; then fail "--hierarchy off ran hierarchical"; fi

intra=$(field intra_node_sent_bytes "$hier")
inter=$(field inter_node_sent_bytes "$hier")
flat=$(field sent_bytes_per_rank "$ref")
# The reduce-scatter alone sends half the bucket's floats to the node's other rank.
awk -v x="$intra" 'BEGIN{exit !(x >= 100003 / 2 * 4)}' || fail "intra-node sent $intra bytes"
# Bytes leaving a node: its 2 ranks' inter-node bytes.
awk -v x="$inter" -v f="$flat" 'BEGIN{exit !(x > 0 && 2 * x <= 1.25 * f)}' ||
  fail "2 x inter-node $inter bytes > 1.25 x flat one-rank-per-node $flat"
echo "PASS: intra $intra, 2 x inter $inter vs flat $flat bytes per rank and call"
