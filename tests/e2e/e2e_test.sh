#!/usr/bin/env bash
# End-to-end tests: a gradex-coordinator and gradex-agent processes over UCX on
# this machine, every step's invariants checked in-band (--check-invariants).
# usage: e2e_test.sh COORDINATOR AGENT SCENARIO
#   basic4 | covap3 | teams6 | kill | kill-rank0 | coordinator-restart | late-join | violation |
#   prometheus | join-retry | stall
# Every wait is bounded; the temporary directory and every process started are
# removed on exit (KEEP_TMP=1 keeps the logs).
set -euo pipefail

COORDINATOR=$1
AGENT=$2
SCENARIO=$3
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gradex-e2e.XXXXXX")
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
trap cleanup EXIT

JOB=e2e-$SCENARIO
ELEMENTS=100003
STEPS=200
UCX_TLS_E2E=${GRADEX_E2E_UCX_TLS:-tcp}
COORD_PORT=$(free_port)
COORD_METRICS=$(free_port)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
T0=$(now)

# Common job: spardl-bsag (or $ALGORITHM) at density 0.01, barriers every 16 steps.
ALGORITHM=spardl-bsag
config() {
  write_config "$TMP/job.json" job_id="$JOB" algorithm="$ALGORITHM" density=0.01 \
    barrier_period=16 plan_lead_steps=16 step_deadline_ms=5000 "$@"
}

run_world() {  # run_world P TEAMS: P agents, every one to the end
  local p=$1 teams=$2 i
  config world_size="$p" teams="$teams" lease_ms=3000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do start_agent "$i"; done
  # shellcheck disable=SC2046  # one argument per agent
  expect_all_exit_zero 120 $(seq 0 $((p - 1)))
  for ((i = 0; i < p; ++i)); do expect_finished "$i" "$p"; done
  for ((i = 0; i < p; ++i)); do
    local n
    n=$(steps_of "$i" 'invariants ok$' | wc -l)
    ((n == STEPS)) || fail "agent $i checked $n steps, expected $STEPS"
  done
  grep -Eq "epoch [0-9]+: $p members, $teams teams, algorithm $ALGORITHM" "$TMP/coordinator.log" ||
    fail "the coordinator never published $p members in $teams teams"
}

# kill -9 of agent `victim` (default 2; kill-rank0: rank 0, whose rules the
# others adopt at every entry) at a random step.
scenario_kill() {
  local p=4 victim=${1:-2} kill_at t_kill i survivors=()
  for ((i = 0; i < p; ++i)); do ((i == victim)) || survivors+=("$i"); done
  config world_size=$p teams=1 lease_ms=1000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do start_agent "$i"; done
  kill_at=$((20 + RANDOM % 100))
  wait_for "$TMP/agent$victim.out" "^[0-9.]+ step $kill_at " 90 || fail "agent $victim never reached step $kill_at"
  t_kill=$(now)  # before the kill: the delays measured are upper bounds
  kill -9 "${AGENT_PID[$victim]}"
  echo "killed agent $victim after its step $kill_at"
  for i in "${survivors[@]}"; do
    wait_for "$TMP/agent$i.err" "gradex-agent: " 15 || fail "survivor $i reported no error"
    local t_err
    t_err=$(grep -m1 "gradex-agent: " "$TMP/agent$i.err" | cut -d' ' -f1)
    # Within the step deadline (5 s) of the kill, plus 1 s for a step that
    # began just after it and for waking up on a loaded machine.
    awk -v a="$t_err" -v b="$t_kill" 'BEGIN { exit !(a - b < 6.0) }' ||
      fail "survivor $i errored $(awk -v a="$t_err" -v b="$t_kill" 'BEGIN{print a-b}') s after the kill"
    echo "survivor $i errored $(awk -v a="$t_err" -v b="$t_kill" 'BEGIN{printf "%.3f", a-b}') s after the kill: $(grep -m1 "gradex-agent: " "$TMP/agent$i.err" | cut -d' ' -f2- | cut -c1-160)"
  done
  expect_all_exit_zero 120 "${survivors[@]}"
  grep -q "evicted member .*lease expired" "$TMP/coordinator.log" || fail "the coordinator evicted no one"
  grep -Eq "epoch [0-9]+: 3 members" "$TMP/coordinator.log" || fail "no epoch of 3 members"
  for i in "${survivors[@]}"; do expect_finished "$i" 3; done
}

# expect_joined_within LOG AGENTS BOUND: every agent e2e-aI (I in AGENTS) is
# logged joining coordinator LOG within BOUND s of its "serving on" line.
expect_joined_within() {
  local log=$1 agents=$2 bound=$3 t_serve i t_join
  t_serve=$(grep -m1 "serving on" "$log" | cut -d' ' -f1)
  for i in $agents; do
    wait_for "$log" "join: member [0-9]+ agent 'e2e-a$i'" 30 || fail "agent $i never joined ($log)"
    t_join=$(grep -m1 -E "join: member [0-9]+ agent 'e2e-a$i'" "$log" | cut -d' ' -f1)
    echo "agent $i joined $(awk -v a="$t_join" -v b="$t_serve" 'BEGIN{printf "%.3f", a-b}') s after the coordinator listened"
    awk -v a="$t_join" -v b="$t_serve" -v m="$bound" 'BEGIN { exit !(a - b < m) }' ||
      fail "agent $i joined $(awk -v a="$t_join" -v b="$t_serve" 'BEGIN{print a-b}') s after the coordinator listened (bound $bound s)"
  done
}

scenario_coordinator_restart() {
  local p=4 i t_kill t_back reports after
  # Long enough that the agents outlive the outage and the re-join even on an
  # idle machine.
  STEPS=${E2E_RESTART_STEPS:-3000}
  # Lease 6 s: the re-join bound below (2.5 s: agents re-join 0.2-1.2 s after
  # the coordinator listens, gRPC's reconnect backoff being capped at 1 s) is
  # well under it, so no re-joined agent is evicted while the rest come back.
  config world_size=$p teams=2 lease_ms=6000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do start_agent "$i"; done
  wait_for "$TMP/agent0.out" "^[0-9.]+ step 20 " 90 || fail "agent 0 never reached step 20"
  t_kill=$(now)
  kill -9 "$COORD_PID"
  wait "$COORD_PID" 2>/dev/null || true
  # Down long enough that the agents' reconnect backoff reaches its cap.
  sleep "${E2E_RESTART_OUTAGE_S:-2}"
  start_coordinator coordinator2
  expect_joined_within "$TMP/coordinator2.log" "0 1 2 3" 2.5
  wait_for "$TMP/coordinator2.log" "epoch [0-9]+: $p members" 30 ||
    fail "the restarted coordinator formed no epoch of $p members"
  t_back=$(grep -m1 -E "epoch [0-9]+: $p members" "$TMP/coordinator2.log" | cut -d' ' -f1)
  echo "coordinator down at $(awk -v a="$t_kill" -v b="$T0" 'BEGIN{printf "%.2f", a-b}') s, epoch rebuilt $(awk -v a="$t_back" -v b="$t_kill" 'BEGIN{printf "%.2f", a-b}') s later"
  # Reports of the steps run from 1 s after the rebuild on must all arrive
  # (accepted, or ignored as stale: steps of the old epoch run until the new
  # one's barrier): read the counter before anyone leaves.
  wait_progress "$TMP/agent0.out" "^[0-9.]+ step $((STEPS - 40)) " 30 ||
    fail "agent 0 never reached step $((STEPS - 40)) (no new step for 30 s, or 600 s in all)"
  sleep 1.5  # reports are batched and sent asynchronously
  # (set -e would end the script without a word on a failed substitution.)
  reports=$(curl -sf --max-time 10 "http://127.0.0.1:$COORD_METRICS/metrics" |
    awk '/^gradex_coordinator_step_reports_total\{/ { s += $2 } END { print s + 0 }') ||
    fail "cannot read the restarted coordinator's metrics"
  after=0
  for ((i = 0; i < p; ++i)); do
    local t_cut
    t_cut=$(grep -E "^[0-9.]+ step $((STEPS - 40)) " "$TMP/agent$i.out" | cut -d' ' -f1) ||
      fail "agent $i printed no step $((STEPS - 40))"
    after=$((after + $(awk -v lo="$t_back" -v hi="$t_cut" '$1 > lo + 1.0 && $1 <= hi && $2 == "step"' \
      "$TMP/agent$i.out" | wc -l)))
  done
  echo "restarted coordinator received $reports reports; agents ran $after steps from 1 s after the rebuild to step $((STEPS - 40))"
  ((after > 0)) || fail "no steps ran after the rebuild (run too short to measure)"
  ((reports >= after)) || fail "lost step reports: $reports received < $after steps run after the gap"
  expect_all_exit_zero 120 0 1 2 3
  for ((i = 0; i < p; ++i)); do expect_finished "$i" "$p"; done
  ! grep -q "evicted member" "$TMP/coordinator2.log" || fail "the restarted coordinator evicted an agent"
}

# The first join retries a coordinator that is not there yet, until
# --join-timeout-s, and gives up at once when it is refused.
scenario_join_retry() {
  local p=4 i rc t0 t1 out
  config world_size=$p teams=1 lease_ms=3000
  # Nobody listens: fails at its 2 s join deadline (UCX start-up and a loaded
  # machine: up to 10 s in all), after progress lines, with a clear error.
  t0=$(now)
  rc=0
  out=$(timeout 30 "$AGENT" --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" --token-file "$TMP/token" \
    --elements "$ELEMENTS" --steps 1 --agent-id e2e-lonely --ucx-tls "$UCX_TLS_E2E" --join-timeout-s 2 2>&1) || rc=$?
  t1=$(now)
  echo "unreachable coordinator: rc $rc after $(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.2f", a-b}') s: $out"
  ((rc == 1)) || fail "an agent with no coordinator exited with $rc, expected 1"
  [[ "$out" == *"waiting for coordinator at 127.0.0.1:$COORD_PORT: UNAVAILABLE (attempt 1,"* ]] ||
    fail "no progress line while waiting for the coordinator"
  [[ "$out" == *"no coordinator at 127.0.0.1:$COORD_PORT within the join timeout"* ]] ||
    fail "no clear error at the join deadline"
  awk -v a="$t1" -v b="$t0" 'BEGIN { exit !(a - b >= 2.0 && a - b < 10.0) }' ||
    fail "gave up after $(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}') s, expected its 2 s join deadline"
  # Agents started before their coordinator (as a scheduler may start pods):
  # they wait, and join once it listens.
  for ((i = 0; i < p; ++i)); do start_agent "$i" --join-timeout-s 60; done
  for ((i = 0; i < p; ++i)); do
    wait_for "$TMP/agent$i.err" "waiting for coordinator at " 30 || fail "agent $i printed no progress line"
  done
  sleep 2
  start_coordinator coordinator
  expect_joined_within "$TMP/coordinator.log" "0 1 2 3" 2.5
  # A wrong token: refused at once (UNAUTHENTICATED), not retried for 60 s.
  echo "not-the-job-token-0123456789" >"$TMP/bad-token"
  t0=$(now)
  rc=0
  out=$(timeout 30 "$AGENT" --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" --token-file "$TMP/bad-token" \
    --elements "$ELEMENTS" --steps 1 --agent-id e2e-intruder --ucx-tls "$UCX_TLS_E2E" --join-timeout-s 60 2>&1) || rc=$?
  t1=$(now)
  echo "wrong token: rc $rc after $(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.2f", a-b}') s: $out"
  ((rc == 1)) || fail "an agent with a wrong token exited with $rc, expected 1"
  [[ "$out" == *"UNAUTHENTICATED: the coordinator at 127.0.0.1:$COORD_PORT refused the join"* ]] ||
    fail "the wrong token's error does not say UNAUTHENTICATED"
  [[ "$out" != *"waiting for coordinator"* ]] || fail "a refused join was retried"
  awk -v a="$t1" -v b="$t0" 'BEGIN { exit !(a - b < 2.0) }' ||
    fail "a refused join took $(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}') s, expected < 2 s"
  expect_all_exit_zero 120 0 1 2 3
  for ((i = 0; i < p; ++i)); do expect_finished "$i" "$p"; done
}

scenario_late_join() {
  local i first
  config world_size=3 max_world_size=4 teams=1 lease_ms=3000
  start_coordinator coordinator
  for i in 0 1 2; do start_agent "$i"; done
  wait_for "$TMP/agent0.out" "^[0-9.]+ step 20 " 90 || fail "agent 0 never reached step 20"
  start_agent 3
  expect_all_exit_zero 120 0 1 2 3
  first=$(steps_of 3 | head -n 1)
  [[ "$first" =~ ^step\ ([0-9]+)\ epoch\ ([0-9]+)\ rank\ 3/4 ]] || fail "late joiner's first step: '$first'"
  local s=${BASH_REMATCH[1]} e=${BASH_REMATCH[2]}
  ((s % 16 == 0 && s > 20 && e >= 2)) || fail "late joiner started at step $s epoch $e, expected a barrier (multiple of 16) past 20 in a later epoch"
  echo "late joiner admitted at step $s, epoch $e"
  for i in 0 1 2; do
    steps_of "$i" "^step $s epoch $e rank [0-9]/4 " | grep -q . || fail "agent $i did not run step $s in epoch $e with 4 ranks"
    expect_finished "$i" 4
  done
  expect_finished 3 4
  ! grep -q "gradex-agent: " "$TMP"/agent*.err || fail "an agent reported an error"
}

# The checks can fail: rank-local corruption of one result at step 50 stops
# every agent there with status 3 (conservation on the corrupted one,
# consistency on the others).
scenario_violation() {
  local p=4 i rc
  config world_size=$p teams=1 lease_ms=3000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do
    if ((i == 1)); then start_agent "$i" --test-corrupt-step 50; else start_agent "$i"; fi
  done
  for ((i = 0; i < p; ++i)); do
    rc=0
    wait_pid "${AGENT_PID[$i]}" 90 || rc=$?
    ((rc == 3)) || fail "agent $i exited with $rc, expected 3 (invariant violated)"
    grep -q "INVARIANT VIOLATED: step 50 " "$TMP/agent$i.err" || fail "agent $i did not report step 50"
  done
  grep -q "step 50 .*conservation" "$TMP/agent1.err" || fail "the corrupted rank did not report conservation"
  for i in 0 2 3; do
    grep -q "step 50 .*consistency" "$TMP/agent$i.err" || fail "agent $i did not report consistency"
  done
  [[ "$(steps_of 0 | tail -n 1)" == "step 49 "* ]] || fail "agent 0 went past step 49"
}

scenario_prometheus() {
  local prom prom_port i names missing=() name q
  prom=$(command -v prometheus || true)
  if [[ -z "$prom" ]]; then
    echo "SKIP: no prometheus binary (Debian package 'prometheus'; scripts/install-deps installs it)"
    exit 77
  fi
  prom_port=$(free_port)
  # Long enough for several scrapes of every agent on an idle machine (~10 s).
  STEPS=2000
  local p=4 agent_ports=()
  for ((i = 0; i < p; ++i)); do agent_ports+=("$(free_port)"); done
  {
    echo "global: {scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 10s}"
    echo "scrape_configs:"
    echo "  - job_name: coordinator"
    echo "    static_configs: [{targets: ['127.0.0.1:$COORD_METRICS']}]"
    echo "  - job_name: agents"
    printf "    static_configs: [{targets: ["
    printf "'127.0.0.1:%s'," "${agent_ports[@]}" | sed 's/,$//'
    echo "]}]"
  } >"$TMP/prometheus.yml"
  "$prom" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom-data" \
    --web.listen-address="127.0.0.1:$prom_port" > >(stamp >"$TMP/prometheus.log") 2>&1 &
  local prom_pid=$!
  E2E_PIDS+=("$prom_pid")
  wait_for "$TMP/prometheus.log" "Server is ready to receive web requests" 30 || fail "prometheus did not start"
  config world_size=$p teams=2 lease_ms=3000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do start_agent "$i" --metrics-port "${agent_ports[$i]}"; done
  # Scrape while the run is under way: at least 5 s of samples of every target.
  wait_for "$TMP/agent0.out" "^[0-9.]+ step 5 " 90 || fail "agent 0 never reached step 5"
  local end=$((EPOCHSECONDS + 60)) up
  while :; do
    up=$(curl -sf "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode 'query=count(up == 1)' |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
    [[ "$up" == "$((p + 1))" ]] && break
    ((EPOCHSECONDS < end)) || fail "prometheus sees $up of $((p + 1)) targets up"
    sleep 0.5
  done
  # A wrong token: refused, and counted (gradex_coordinator_auth_failures_total).
  echo "not-the-job-token-0123456789" >"$TMP/bad-token"
  local rc=0 out
  out=$(timeout 30 "$AGENT" --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" \
    --token-file "$TMP/bad-token" --elements "$ELEMENTS" --steps 1 --agent-id e2e-intruder 2>&1) || rc=$?
  if ((rc == 0)) || [[ "$out" != *UNAUTHENTICATED* ]]; then
    fail "a wrong token was not refused: rc $rc: $out"
  fi
  sleep 5
  expect_all_exit_zero 150 0 1 2 3
  # Every metric documented in docs/metrics.md, over the whole run (the
  # agents are gone by now: last_over_time reads past their staleness marks).
  # shellcheck disable=SC2016  # the backquotes are literal: the table's code spans
  # The client's (gradex_client_*) are served by trainers embedding
  # gradex::Client, not by gradex-agent: tests/client checks those; the
  # parameter server's (gradex_ps_server_*) by `--role server`: e2e_ps does;
  # a PsWorker's (gradex_ps_worker_*): e2e_ps and ps_worker_metrics_test.
  names=$(grep -oE '^\| `gradex_[a-z0-9_]+`' "$HERE/../../docs/metrics.md" | tr -d '|` ' |
    grep -v '^gradex_client_' | grep -v '^gradex_ps_server_' | grep -v '^gradex_ps_worker_' |
    sort -u)
  [[ -n "$names" ]] || fail "no metric names found in docs/metrics.md"
  local found=0
  for name in $names; do
    q="count(last_over_time({__name__=~\"${name}(_bucket|_count|_sum)?\"}[10m]))"
    local n
    n=$(curl -sf "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$q" |
      python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["status"]=="success"; r=d["data"]["result"]; print(r[0]["value"][1] if r else 0)') ||
      fail "query $q failed"
    if [[ "$n" == 0 ]]; then missing+=("$name"); else found=$((found + 1)); fi
  done
  echo "prometheus: $found documented metrics found"
  ((${#missing[@]} == 0)) || fail "documented metrics prometheus never saw: ${missing[*]}"
  kill "$prom_pid"
  wait_pid "$prom_pid" 20 || fail "prometheus did not stop within 20 s"
}

# A hang in which nobody is behind: agent 2 stays out of step 30 for 4.5 s
# (--debug-stall-ms, its heartbeats go on) with a 3 s step deadline, so the
# others all wait inside step 30 and the laggard rule sees no one behind. The
# coordinator must name rank 2 from the heartbeats' wait states before the
# waiters give up; their own errors must name the peer they timed out on.
scenario_stall() {
  local p=4 i
  STEPS=60
  config world_size=$p teams=1 lease_ms=1500 step_deadline_ms=3000
  start_coordinator coordinator
  for ((i = 0; i < p; ++i)); do
    if ((i == 2)); then
      start_agent "$i" --debug-stall-at-step 30 --debug-stall-ms 4500
    else
      start_agent "$i"
    fi
  done
  wait_for "$TMP/coordinator.log" "step 30 stalled in epoch" 60 ||
    fail "the coordinator did not report the stall of step 30"
  grep -E "step 30 stalled in epoch [0-9]+ \(waiting for [0-9.]+m?s\): rank 2 \(host '[^']*', agent 'e2e-a2'\) is not in the exchange of step 30: ranks 0, 1, 3 wait on it$" \
    "$TMP/coordinator.log" >/dev/null || fail "the coordinator's stall line does not name rank 2 as the cause: $(grep -m1 'stalled' "$TMP/coordinator.log")"
  echo "coordinator: $(grep -m1 'step 30 stalled' "$TMP/coordinator.log" | cut -d' ' -f3-)"
  for i in 0 1 3; do
    wait_for "$TMP/agent$i.err" "gradex-agent: .*step 30 " 15 || fail "agent $i reported no failure of step 30"
    # Timed out (the peer named by the agent), or failed fast when a peer
    # that timed out first aborted (the transport names that peer).
    grep -Eq "gradex-agent: .*step 30 .*(timed out after [0-9]+ ms waiting for rank [0-9], agent 'e2e-a[0-9]'|peer [0-9])" \
      "$TMP/agent$i.err" || fail "agent $i's error does not name the peer it waited for"
    echo "agent $i: $(grep -m1 'gradex-agent: .*step 30 ' "$TMP/agent$i.err" | cut -d' ' -f2- | cut -c1-70) ... $(grep -m1 'gradex-agent: .*step 30 ' "$TMP/agent$i.err" | grep -oE '(\[timed out after .*|peer [0-9].*)$')"
  done
  grep -Eq "timed out after [0-9]+ ms waiting for rank" "$TMP"/agent[013].err ||
    fail "no waiter timed out naming its peer"
  local stalled
  stalled=$(curl -sf "http://127.0.0.1:$COORD_METRICS/metrics" |
    awk '/^gradex_coordinator_stalled_steps_total/ { print $2 }')
  awk -v n="${stalled:-0}" 'BEGIN { exit !(n >= 1) }' ||
    fail "gradex_coordinator_stalled_steps_total is '${stalled}', expected at least 1"
  # The blame, labelled: rank 2 once, nobody else.
  local blames
  blames=$(curl -sf "http://127.0.0.1:$COORD_METRICS/metrics" |
    awk '/^gradex_coordinator_stall_blames_total/ && $2 > 0 { match($0, /rank="[0-9]+"/); print substr($0, RSTART, RLENGTH) "=" $2 }')
  [[ "$blames" == 'rank="2"=1' ]] ||
    fail "gradex_coordinator_stall_blames_total: '${blames}', expected rank 2 blamed once"
  echo "coordinator metrics: stall blamed on ${blames}"
  # Everyone recovers (new epoch) and finishes.
  expect_all_exit_zero 90 0 1 2 3
}

case "$SCENARIO" in
  basic4) run_world 4 1 ;;
  covap3) ALGORITHM=covap run_world 3 1 ;;  # its decayed residual mass in the checks
  teams6) run_world 6 3 ;;
  kill) scenario_kill 2 ;;
  kill-rank0) scenario_kill 0 ;;
  coordinator-restart) scenario_coordinator_restart ;;
  late-join) scenario_late_join ;;
  violation) scenario_violation ;;
  prometheus) scenario_prometheus ;;
  stall) scenario_stall ;;
  join-retry) scenario_join_retry ;;
  *) echo "unknown scenario $SCENARIO" >&2; exit 2 ;;
esac
echo "PASS $SCENARIO in $(awk -v a="$(now)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}') s"
