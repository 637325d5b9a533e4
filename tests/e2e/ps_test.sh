#!/usr/bin/env bash
# Parameter-server job end to end (DGS): a gradex-coordinator, one
# `gradex-agent --role server` with snapshots, and three PsWorker processes
# (tests/client/ps_worker_rank) over UCX on this machine, each minimising
# 0.5·|w − t|² with DGS at density 0.05.
#   1. a worker killed (SIGKILL) does not stop the others: both keep stepping;
#   2. its replacement joins (a new worker) and takes a full sync: its first
#      loss is the job's, not the initial one;
#   3. the server killed (SIGKILL): every worker's Step fails with an error
#      naming the server within its timeout (3 s);
#   4. the server restarted from its snapshot (every 200 ms): the workers
#      re-join, re-sync, and the loss continues from where it was.
# usage: ps_test.sh COORDINATOR AGENT PS_WORKER_RANK
set -euo pipefail

COORDINATOR=$1
AGENT=$2
WORKER=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gradex-ps.XXXXXX")
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
trap cleanup EXIT

JOB=e2e-ps
UCX_TLS_E2E=${GRADEX_E2E_UCX_TLS:-tcp}
COORD_PORT=$(free_port)
COORD_METRICS=$(free_port)
SERVER_METRICS=$(free_port)
WORKER_METRICS=$(free_port)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
mkdir -p "$TMP/snap"
cat >"$TMP/job.json" <<JSON
{"job_id": "$JOB", "world_size": 3, "max_world_size": 3, "algorithm": "dgs", "density": 0.05,
 "lease_ms": 1500, "entry_timeout_ms": 20000, "rendezvous_timeout_ms": 60000,
 "ps": {"servers": 1, "snapshot_interval_ms": 200, "layer_sizes": [3000, 1000]}}
JSON
export UCX_TLS=$UCX_TLS_E2E

start_server() {
  "$AGENT" --role server --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" \
    --token-file "$TMP/token" --agent-id ps-server --ucx-tls "$UCX_TLS_E2E" \
    --snapshot-dir "$TMP/snap" --metrics-port "$SERVER_METRICS" --join-timeout-ms 60000 \
    > >(stamp >"$TMP/$1.log") 2>&1 &
  SERVER_PID=$!
  E2E_PIDS+=("$SERVER_PID")
}
declare -A WPID
start_worker() {  # start_worker NAME RANK (w0 serves its metrics)
  local m=-1
  [[ $1 == w0 ]] && m=$WORKER_METRICS
  "$WORKER" --coordinator "127.0.0.1:$COORD_PORT" --token-file "$TMP/token" --job "$JOB" \
    --rank "$2" --world 3 --steps 100000 --step-ms 10 --timeout-ms 3000 --metrics-port "$m" \
    > >(stamp >"$TMP/$1.log") 2>&1 &
  WPID[$1]=$!
  E2E_PIDS+=("$!")
}
steps() { grep -cE '^[0-9.]+ step ' "$TMP/$1.log" || true; }
# The loss of NAME's last step line.
last_loss() { grep -E '^[0-9.]+ step ' "$TMP/$1.log" | tail -1 | awk '{print $5}'; }
first_loss() { grep -m1 -E '^[0-9.]+ step ' "$TMP/$1.log" | awk '{print $5}'; }
# The loss after NAME's first step: its parameters as the servers synced them.
synced_loss() { grep -E '^[0-9.]+ step ' "$TMP/$1.log" | sed -n 2p | awk '{print $5}'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

start_coordinator coordinator
start_server server
for w in w0 w1 w2; do start_worker "$w" "${w#w}"; done
for w in w0 w1 w2; do
  wait_for "$TMP/$w.log" '^[0-9.]+ step 40 ' 90 || fail "$w never reached step 40"
done
INITIAL=$(first_loss w0)
grep -q 'shard 0 on rank' "$TMP/coordinator.log" || fail "the coordinator never assigned shard 0"

# 1. A worker dies; the others go on.
kill -9 "${WPID[w2]}"
before0=$(steps w0)
before1=$(steps w1)
sleep 2
after0=$(steps w0)
after1=$(steps w1)
((after0 >= before0 + 20 && after1 >= before1 + 20)) ||
  fail "survivors stalled after a worker died: w0 $before0 -> $after0, w1 $before1 -> $after1"
echo "1. worker killed: w0 $before0 -> $after0 steps, w1 $before1 -> $after1 in 2 s"

# 2. Its replacement joins once the dead one is evicted, with a full sync.
start_worker w3 2
wait_for "$TMP/w3.log" '^[0-9.]+ step 5 ' 60 || fail "the replacement never stepped"
JOINED=$(synced_loss w3)
NOW0=$(last_loss w0)
lt "$JOINED" "$(awk -v i="$INITIAL" 'BEGIN { print i / 2 }')" ||
  fail "the replacement started at loss $JOINED, the job's initial loss is $INITIAL (no full sync?)"
echo "2. replacement: first loss $JOINED (initial $INITIAL, w0 now $NOW0)"

# 3. The server dies: every worker's Step fails, naming it, within the timeout.
wait_for "$TMP/server.log" 'serving 1 of 1 shards' 10 || fail "server not serving"
sleep 0.5  # at least two snapshots of the running job
LOSS_AT_KILL=$(last_loss w0)
T_KILL=$EPOCHREALTIME
kill -9 "$SERVER_PID"
for w in w0 w1 w3; do
  wait_for "$TMP/$w.log" '^[0-9.]+ error after' 10 || fail "$w did not fail within 10 s of the server's death"
  line=$(grep -m1 -E '^[0-9.]+ error after' "$TMP/$w.log")
  t=$(awk '{print $1}' <<<"$line")
  ms=$(awk '{print $4}' <<<"$line")
  lt "$(awk -v t="$t" -v k="$T_KILL" 'BEGIN { print t - k }')" 4.5 ||
    fail "$w failed $(awk -v t="$t" -v k="$T_KILL" 'BEGIN { print t - k }') s after the kill"
  ((ms <= 3500)) || fail "$w's Step took $ms ms to fail (timeout 3000)"
  echo "3. $w: ${line#* }"
done

# 4. The server restarts from its snapshot; the workers re-sync and go on.
ls "$TMP/snap"/shard-0-of-1.dgss >/dev/null || fail "no snapshot written"
start_server server2
wait_for "$TMP/server2.log" 'restored version [1-9]' 30 || fail "the server did not restore its snapshot"
for w in w0 w1 w3; do
  n=$(steps "$w")
  wait_for "$TMP/$w.log" "^[0-9.]+ step $((n + 20)) " 60 || fail "$w did not resume after the restart"
done
# One awk, no `| head -1`: under pipefail a writer killed by SIGPIPE once head
# has its line fails the substitution, and set -e ends the test without a word.
AFTER=$(awk -v k="$T_KILL" '$2 == "step" && $1 ~ /^[0-9.]+$/ && $1 > k { print $5; exit }' "$TMP/w0.log")
lt "$AFTER" "$(awk -v l="$LOSS_AT_KILL" -v i="$INITIAL" 'BEGIN { print l + (i - l) / 4 }')" ||
  fail "loss after the restart $AFTER: from scratch (initial $INITIAL, at the kill $LOSS_AT_KILL)"
echo "4. $(grep -m1 -E 'restored version' "$TMP/server2.log" | cut -d' ' -f2-); loss at the kill $LOSS_AT_KILL, first after the restart $AFTER, initial $INITIAL"
curl -s "http://127.0.0.1:$SERVER_METRICS/metrics" >"$TMP/metrics.txt"
grep -q '^gradex_ps_server_pushes_total [1-9]' "$TMP/metrics.txt" ||
  fail "the restarted server's metrics show no pushes"
# shellcheck disable=SC2016  # the backquotes are literal: the table's code spans
for name in $(grep -oE '^\| `gradex_ps_server_[a-z_]+`' "$HERE/../../docs/metrics.md" | tr -d '|` '); do
  grep -qE "^${name}(_bucket|_count|_sum)?[{ ]" "$TMP/metrics.txt" || fail "documented $name not exported"
done
# The worker's own metrics: every documented one exported, the server's
# death counted among its failed steps, its rejoin among its full syncs.
ERRORS_BEFORE=$(grep -cE '^[0-9.]+ error after' "$TMP/w0.log" || true)
curl -s "http://127.0.0.1:$WORKER_METRICS/metrics" >"$TMP/worker-metrics.txt"
sleep 0.3  # a step that failed just before the scrape is logged after it
ERRORS=$(grep -cE '^[0-9.]+ error after' "$TMP/w0.log" || true)
# shellcheck disable=SC2016  # the backquotes are literal: the table's code spans
for name in $(grep -oE '^\| `gradex_ps_worker_[a-z_]+`' "$HERE/../../docs/metrics.md" | tr -d '|` '); do
  grep -qE "^${name}(_bucket|_count|_sum)?[{ ]" "$TMP/worker-metrics.txt" ||
    fail "documented $name not exported by the worker"
done
FAILED=$(awk '/^gradex_ps_worker_failed_steps_total\{/ { s += $2 } END { print s + 0 }' "$TMP/worker-metrics.txt")
((FAILED >= 1 && FAILED >= ERRORS_BEFORE && FAILED <= ERRORS)) ||
  fail "w0's metrics count $FAILED failed steps, its log $ERRORS_BEFORE..$ERRORS (at least the server's death)"
SYNCS=$(awk '/^gradex_ps_worker_full_syncs_total / { print $2 }' "$TMP/worker-metrics.txt")
lt 1 "$SYNCS" || fail "w0's metrics show $SYNCS full syncs (its join and the rejoin after the restart)"
echo "5. w0's metrics: $FAILED failed steps ($(grep -E '^gradex_ps_worker_failed_steps_total\{' "$TMP/worker-metrics.txt" | awk '$2 > 0 { printf "%s ", $0 }')), $SYNCS full syncs"
echo "PASS"
