#!/usr/bin/env bash
# The hostile-member suite: a coordinator, real agents checking
# every step's invariants in-band, and hostile_member, a client holding the
# job token that sends what a hostile or broken member would. Each scenario
# asserts the job survives: every agent finishes every step with the
# invariants checked, nobody crashes, and the coordinator refuses the
# hostile calls naming the field.
# usage: hostile_test.sh COORDINATOR AGENT HOSTILE SCENARIO [PS_WORKER_RANK]
#   bad-address | bounds | flood | idle | impersonate | sigstop | sigstop-two | wireup-stall |
#   takeover | watch-flood | fd-exhaustion | slow-scrape | listener-fuzz |
#   listener-fuzz-dgs (needs PS_WORKER_RANK, tests/client/ps_worker_rank) | tag-flood
set -euo pipefail

COORDINATOR=$1
AGENT=$2
HOSTILE=$3
SCENARIO=$4
PS_WORKER=${5:-}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gradex-hostile.XXXXXX")
# shellcheck source=tests/e2e/lib.sh
source "$HERE/../e2e/lib.sh"
trap cleanup EXIT

JOB=hostile-$SCENARIO
ELEMENTS=100003
STEPS=${HOSTILE_STEPS:-300}
UCX_TLS_E2E=${GRADEX_E2E_UCX_TLS:-tcp}
COORD_PORT=$(free_port)
COORD_METRICS=$(free_port)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"

hostile() {  # hostile ACTION [ARG...]: its output, also kept in hostile.log
  "$HOSTILE" --coordinator "127.0.0.1:$COORD_PORT" --token-file "$TMP/token" --job "$JOB" "$@" |
    tee -a "$TMP/hostile.log"
}

# expect_line OUTPUT REGEX: a line of OUTPUT matches.
expect_line() { grep -Eq -- "$2" <<<"$1" || fail "expected a line matching '$2' in: $1"; }

# Extra flags for agent I, as AGENT_EXTRA[I] (word-split).
declare -A AGENT_EXTRA=()

start_job() {  # start_job P [config...]: P agents, the job running past step 20
  local p=$1 i
  shift
  write_config "$TMP/job.json" job_id="$JOB" algorithm=spardl-bsag density=0.01 \
    barrier_period=16 plan_lead_steps=16 step_deadline_ms="${DEADLINE_MS:-5000}" world_size="$p" \
    teams=1 "$@"
  start_coordinator coordinator
  # shellcheck disable=SC2086  # the extra flags are words
  for ((i = 0; i < p; ++i)); do start_agent "$i" ${AGENT_EXTRA[$i]:-}; done
  wait_for "$TMP/agent0.out" "^[0-9.]+ step 20 " 90 || fail "agent 0 never reached step 20"
}

# Epochs formed before the first agent finished (each leave opens one).
epochs_while_running() {
  awk '/leave: member/ { exit } /epoch [0-9]+: [0-9]+ members/ { n++ } END { print n + 0 }' \
    "$TMP/coordinator.log"
}

finish_job() {  # finish_job P WORLD: every agent ends with STEPS steps in WORLD ranks
  local p=$1 world=$2 i
  # shellcheck disable=SC2046  # one argument per agent
  expect_all_exit_zero 180 $(seq 0 $((p - 1)))
  for ((i = 0; i < p; ++i)); do expect_finished "$i" "$world"; done
}

# Item 1: a malformed address and an incompatible UCX are refused at Join; a
# well-formed address where nothing listens fails that epoch's connect on
# every agent, naming the peer, without a crash; its lease lapses, it is
# evicted, and the job goes on.
scenario_bad_address() {
  local out
  start_job 3 max_world_size=4 lease_ms=3000
  out=$(hostile join-address "$(printf '07%.0s' $(seq 64))")
  expect_line "$out" "^join: 3: ucx_address: "
  out=$(hostile join-version 0.9)
  expect_line "$out" "^join: 9: ucx_version: this agent runs UCX 0.9"
  out=$(hostile join-unreachable)
  expect_line "$out" "^join: 0: "
  wait_for "$TMP/coordinator.log" "epoch [0-9]+: 4 members" 60 || fail "the hostile member never entered an epoch"
  wait_for "$TMP/coordinator.log" "failed on rank [0-9] .*peer 3" 60 ||
    fail "no agent reported that it cannot reach peer 3"
  wait_for "$TMP/coordinator.log" "evicted member .*hostile-unreachable" 30 ||
    fail "the unreachable member was never evicted"
  finish_job 3 3
  ! grep -q "Assertion\|ucp_address_unpack" "$TMP"/agent*.err || fail "an agent hit a UCX assertion"
}

# Item 2: epochs, steps and world sizes past what the coordinator knows are
# refused naming the field; the job's epochs and steps stay where they were.
scenario_bounds() {
  local out
  start_job 3 lease_ms=3000
  out=$(hostile rejoin 4294967296 3)
  expect_line "$out" "^join: 3: last_epoch: 4294967296 "
  out=$(hostile rejoin 18446744073709551615 3)
  expect_line "$out" "^join: 3: last_epoch: 18446744073709551615 "
  out=$(hostile rejoin 1 4)
  expect_line "$out" "^join: 3: last_world_size: 4 "
  out=$(hostile heartbeat-step 1000000000000)
  expect_line "$out" "^heartbeat: 3: next_step: 1000000000000 is ahead of the job"
  finish_job 3 3
  ! grep -Eq "from step [0-9]{7,}" "$TMP/coordinator.log" || fail "an epoch placed at a made-up step"
  ! grep -q "stalled" "$TMP/coordinator.log" || fail "a false stall was logged"
  (($(epochs_while_running) == 1)) || fail "epoch churn while the job ran"
}

# Item 4: 5000 Joins into a world_size 3 job: the coordinator holds at most
# 3 + 2 spare members, refuses the rest RESOURCE_EXHAUSTED, its memory stays
# flat and no epoch changes.
scenario_flood() {
  local out rss0 rss1
  # The 2 accepted joins never heartbeat, and finished agents leave: with a
  # 3 s lease and 300 steps, slots freed during a flood that ran past 3 s
  # (or past the job) admitted more (7-12 of 5,000, on main too). The job
  # and the leases outlast the flood.
  STEPS=${HOSTILE_STEPS:-3000}
  start_job 3 lease_ms=30000 entry_timeout_ms=30000
  rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$COORD_PID/status")
  out=$(hostile flood 5000)
  rss1=$(awk '/^VmRSS/ { print $2 }' "/proc/$COORD_PID/status")
  expect_line "$out" "^flood: code 0: 2 joins$"
  expect_line "$out" "^flood: code 8: 4998 joins$"
  echo "coordinator RSS ${rss0} kB before the flood, ${rss1} kB after"
  ((rss1 - rss0 < 20000)) || fail "the coordinator grew by $((rss1 - rss0)) kB under the flood"
  finish_job 3 3
  (($(epochs_while_running) == 1)) || fail "epoch churn under the flood"
}

# Item 5: a member that joins and heartbeats but whose data plane never
# answers (a TCP listener that never accepts) is let into an epoch at a
# barrier; the others wait for it at entry until the epoch's entry deadline
# (4 s), when the coordinator evicts it, naming it in the log and counting
# it; the others run on in a 3-member epoch within a bound (before: they
# re-entered its epochs until their join timeout and failed).
# first_step_after EPOCH [WORLD]: sets T_STEP to the time of agent 0's first
# step in an epoch after EPOCH (in a WORLD-rank one when given), waiting up
# to 40 s; fails naming EPOCH when there is none.
first_step_after() {
  local epoch=$1 world=${2:-} i t
  for ((i = 0; i < 400; ++i)); do
    t=$(awk -v e="$epoch" -v w="$world" \
      '$2 == "step" && $4 == "epoch" && $5 > e && (w == "" || $7 ~ ("/" w "$")) { print $1; exit }' \
      "$TMP/agent0.out")
    [[ -n "$t" ]] && { T_STEP=$t; return; }
    sleep 0.1
  done
  fail "the survivors never ran a step after epoch $epoch"
}

# expect_entry_evictions N: the coordinator counted N entry evictions.
expect_entry_evictions() {
  local metrics
  metrics=$(curl -sf --max-time 10 "http://127.0.0.1:$COORD_METRICS/metrics") || fail "no coordinator metrics"
  [[ $(awk '$1 == "gradex_coordinator_entry_evictions_total" { print $2 }' <<<"$metrics") == "$1" ]] ||
    fail "gradex_coordinator_entry_evictions_total is not $1"
}

scenario_idle() {
  local t_join t_new out epoch4
  start_job 3 max_world_size=4 lease_ms=2000 entry_timeout_ms=4000
  t_join=$(now)
  hostile heartbeat-idle 90 >"$TMP/idle.out" &
  E2E_PIDS+=("$!")
  wait_for "$TMP/coordinator.log" "epoch [0-9]+: 4 members" 60 || fail "the idle member never entered an epoch"
  epoch4=$(grep -m1 -oE "epoch [0-9]+: 4 members" "$TMP/coordinator.log" | cut -d' ' -f2 | tr -d :)
  wait_for "$TMP/coordinator.log" \
    "evicted member [0-9]+ \(agent 'hostile-idle' on host 'hostile-host'\): did not enter epoch $epoch4 within 4000 ms" 40 ||
    fail "the idle member was not evicted and named at the entry deadline"
  first_step_after "$epoch4" 3
  t_new=$T_STEP
  echo "survivors ran a 3-rank step after the idle member's epoch $(awk -v a="$t_new" -v b="$t_join" 'BEGIN{printf "%.2f", a-b}') s after it joined (entry timeout 4 s, lease 2 s)"
  awk -v a="$t_new" -v b="$t_join" 'BEGIN { exit !(a - b < 20) }' ||
    fail "the survivors were held $(awk -v a="$t_new" -v b="$t_join" 'BEGIN{print a-b}') s by the idle member"
  expect_entry_evictions 1
  finish_job 3 3
  out=$(cat "$TMP/idle.out")
  expect_line "$out" "^heartbeat-idle: evicted after [0-9.]+ s: 5: "
}

# Item 5, a member that entered before: agent 2 runs the job's first epoch,
# then stays inside the UCX wire-up of the next one (a late joiner's, at a
# barrier) without connecting or sending its wire-up byte, while its
# heartbeats go on (--debug-stall-entry). Its peers' wire-up waits name it in
# their heartbeats; at the entry deadline (4 s) the coordinator evicts it,
# blamed by a majority of its 3 peers (all 3 unless one's wait is not yet
# half the timeout old), and counts it; the others abandon the stalled entry
# for the next epoch and run on within a bound. The staller's heartbeats
# re-join it at once; it is held back to the next barrier epoch, so the
# survivors' epoch drops it (before: the wire-up left no wait state, nobody
# was blamed, and the peers failed entry after entry, re-joining every 8 s).
scenario_wireup_stall() {
  local t_stall t_new epoch4 i
  AGENT_EXTRA[2]="--debug-stall-entry 2 --debug-stall-ms 90000"
  start_job 3 max_world_size=4 lease_ms=2000 entry_timeout_ms=4000
  start_agent 3
  wait_for "$TMP/coordinator.log" "epoch [0-9]+: 4 members" 60 || fail "the late joiner never entered an epoch"
  epoch4=$(grep -m1 -oE "epoch [0-9]+: 4 members" "$TMP/coordinator.log" | cut -d' ' -f2 | tr -d :)
  wait_for "$TMP/agent2.err" "debug-stall-entry: staying out of epoch $epoch4's wire-up" 60 ||
    fail "agent 2 did not stall in epoch $epoch4's wire-up"
  t_stall=$(grep -m1 "debug-stall-entry: staying out" "$TMP/agent2.err" | cut -d' ' -f1)
  wait_for "$TMP/coordinator.log" \
    "evicted member [0-9]+ \(agent 'e2e-a2' on host '[^']*'\): blamed by [23] of 3 members for not entering epoch $epoch4 within 4000 ms" 40 ||
    fail "the member stalling the wire-up was not evicted and named at the entry deadline"
  wait_for "$TMP/coordinator.log" "epoch $((epoch4 + 1)): 3 members" 10 ||
    fail "the survivors' epoch after the eviction does not leave the staller out"
  first_step_after "$epoch4"
  t_new=$T_STEP
  echo "survivors ran a step after the stalled epoch $epoch4 $(awk -v a="$t_new" -v b="$t_stall" 'BEGIN{printf "%.2f", a-b}') s after the stall began (entry timeout 4 s, lease 2 s)"
  awk -v a="$t_new" -v b="$t_stall" 'BEGIN { exit !(a - b < 15) }' ||
    fail "the survivors were held $(awk -v a="$t_new" -v b="$t_stall" 'BEGIN{print a-b}') s by the staller"
  expect_entry_evictions 1
  # Every agent, the staller too, finishes every step with the invariants
  # checked.
  expect_all_exit_zero 180 0 1 2 3
  for i in 0 1 2 3; do expect_finished "$i" "[34]"; done
}

# Item 3: a token holder cannot heartbeat, report or leave as another member:
# every such call is PERMISSION_DENIED and the job never notices.
scenario_impersonate() {
  local out
  start_job 3 lease_ms=3000
  out=$(hostile impersonate)
  for r in 0 1 2; do
    expect_line "$out" "^heartbeat as rank $r: 7: member_secret"
    expect_line "$out" "^report as rank $r: 7: member_secret"
    expect_line "$out" "^leave as rank $r: 7: member_secret"
  done
  finish_job 3 3
  ! grep -q "leave: member .*forged" "$TMP/coordinator.log" || fail "a forged Leave was applied"
  (($(epochs_while_running) == 1)) || fail "epoch churn while the job ran"
  ! grep -q "forged" "$TMP/coordinator.log" || fail "a forged report was logged"
}

# Item 6: a stopped process (SIGSTOP: alive, silent) is evicted at its lease
# (2 s), and the eviction preempts the step the survivors wait in: they
# enter the 3-member epoch within seconds, not at the 30 s step deadline.
# survivors_step_within N T_STOP WHAT: agent 0 runs a step in an N-rank epoch
# within 12 s of T_STOP (the lease and settle are far shorter than the step
# deadline, so only an eviction that preempts the step meets it); prints when.
survivors_step_within() {
  local n=$1 t_stop=$2 what=$3 re t_new
  re="^[0-9.]+ step [0-9]+ epoch [0-9]+ rank [0-9]/$n "
  wait_for "$TMP/agent0.out" "$re" 40 || fail "the survivors never ran a step without the stopped agent(s)"
  t_new=$(grep -m1 -E "$re" "$TMP/agent0.out" | cut -d' ' -f1)
  echo "survivors ran their first $n-rank step $(awk -v a="$t_new" -v b="$t_stop" 'BEGIN{printf "%.2f", a-b}') s after $what"
  awk -v a="$t_new" -v b="$t_stop" 'BEGIN { exit !(a - b < 12) }' ||
    fail "the survivors waited $(awk -v a="$t_new" -v b="$t_stop" 'BEGIN{print a-b}') s: the eviction did not preempt the step"
}

scenario_sigstop() {
  local t_stop i
  DEADLINE_MS=30000 start_job 4 lease_ms=2000
  t_stop=$(now)
  kill -STOP "${AGENT_PID[3]}"
  survivors_step_within 3 "$t_stop" "the SIGSTOP (lease 2 s, step deadline 30 s)"
  grep -q "preempted: agent 'e2e-a3'" "$TMP"/agent0.err || fail "agent 0 does not say the step was preempted by the eviction"
  kill -9 "${AGENT_PID[3]}"
  expect_all_exit_zero 180 0 1 2
  for i in 0 1 2; do expect_finished "$i" 3; done
}

# Item 6: two members stopped half a second apart (lease 3 s: their leases
# lapse up to a heartbeat interval apart) make ONE epoch change: the
# coordinator holds the new epoch for the loss settle window (1 s) and folds
# in a member already silent for two heartbeat intervals.
scenario_sigstop_two() {
  local t_stop before after i
  DEADLINE_MS=30000 start_job 4 lease_ms=3000
  before=$(grep -cE "epoch [0-9]+: [0-9]+ members" "$TMP/coordinator.log")
  t_stop=$(now)
  kill -STOP "${AGENT_PID[3]}"
  sleep 0.5
  kill -STOP "${AGENT_PID[2]}"
  survivors_step_within 2 "$t_stop" "the first SIGSTOP (lease 3 s, settle 1 s)"
  sleep 3  # a second change would come within a lease
  after=$(grep -cE "epoch [0-9]+: [0-9]+ members" "$TMP/coordinator.log")
  grep -E "epoch [0-9]+: [0-9]+ members|evicted member" "$TMP/coordinator.log" | tail -n 4
  ((after - before == 1)) || fail "$((after - before)) epoch changes for two failures in 0.5 s, expected one"
  grep -qE "epoch [0-9]+: 2 members" "$TMP/coordinator.log" || fail "no 2-member epoch"
  kill -9 "${AGENT_PID[3]}" "${AGENT_PID[2]}"
  expect_all_exit_zero 180 0 1
  for i in 0 1; do expect_finished "$i" 2; done
}

# An agent id belongs to its member: a token holder re-joining every 200 ms
# under the other members' agent ids (public: every plan lists them) without
# their secrets is refused ALREADY_EXISTS naming the id, and the job never
# notices (before: each such join evicted the real member and opened an
# epoch). Then agent 2 is killed and restarted at once under its id: it
# waits for the dead process's lease and joins the running job.
scenario_takeover() {
  local out i
  STEPS=${HOSTILE_STEPS:-3000}  # the job outlives the takeovers (a finished agent's id is free)
  start_job 3 lease_ms=3000
  out=$(hostile takeover 4)
  grep '^takeover:' <<<"$out"
  expect_line "$out" "^join: 0: "
  expect_line "$out" "^takeover: code 6: [0-9]+ joins$"
  ! grep -q "^takeover: code 0: " <<<"$out" || fail "a join under a live member's agent id was accepted"
  expect_line "$out" "^takeover: last refusal: agent_id 'e2e-a[0-2]' is held by live member [0-9]+ "
  (($(epochs_while_running) == 1)) || fail "$(epochs_while_running) epochs while the job ran: the takeovers churned it"
  ! grep -q "agent 'e2e-a[0-2]' host 'hostile-host'" "$TMP/coordinator.log" ||
    fail "a hostile join took over an agent id"
  # A restarted process of the same agent (no secret) waits for its
  # predecessor's lease, then joins the running job.
  kill -9 "${AGENT_PID[2]}"
  start_agent 2
  wait_for "$TMP/agent2.err" "ALREADY_EXISTS" 20 || fail "the restarted agent 2 was not told to wait"
  wait_for "$TMP/coordinator.log" "evicted member [0-9]+ \(agent 'e2e-a2' on host '[^']*'\): lease expired" 20 ||
    fail "agent 2's killed process was never evicted"
  for ((i = 0; i < 300; ++i)); do  # its second join (the first was at the start)
    (($(grep "join: member [0-9]* agent 'e2e-a2' host '" "$TMP/coordinator.log" |
      grep -vc "hostile-host") >= 2)) && break
    sleep 0.1
  done
  ((i < 300)) || fail "the restarted agent 2 never joined"
  grep -m1 "ALREADY_EXISTS" "$TMP/agent2.err"
  expect_all_exit_zero 180 0 1 2
  for i in 0 1 2; do expect_finished "$i" "[23]"; done
}

# Nothing an outsider sends to a port of the job crashes a process: random
# bytes (1..4096, a quarter of them zeros) on FUZZ_CONNECTIONS connections
# to every TCP port each agent and the coordinator listen on, while the job
# runs; every process is alive after, and every agent finishes every step
# (before: 17 zero bytes on an agent's UCX listener port aborted it in
# UCX 1.13's tcp_sockcm_ep.c, rc 134).
scenario_listener_fuzz() {
  local out i
  STEPS=${HOSTILE_STEPS:-100000}  # still running when the fuzz ends; stopped below
  AGENT_EXTRA[0]="--metrics-port $(free_port)"  # its metrics port is fuzzed too
  start_job 3 lease_ms=3000
  # shellcheck disable=SC2046  # one argument per process
  out=$(hostile fuzz-ports "${FUZZ_CONNECTIONS:-1000}" "${FUZZ_SECONDS:-3}" "$COORD_PID" \
    $(for i in 0 1 2; do echo "${AGENT_PID[$i]}"; done))
  echo "$out"
  kill -0 "$COORD_PID" || fail "the coordinator died under the fuzz"
  for i in 0 1 2; do kill -0 "${AGENT_PID[$i]}" || fail "agent $i died under the fuzz"; done
  (($(grep -c "connections" <<<"$out") >= 9)) || fail "expected at least 9 listening ports (coordinator 2, agents 3 x 2, agent 0's metrics), got: $out"
  # Every agent still steps after the fuzz: 50 more steps, invariants checked.
  local after
  after=$(($(steps_of 0 | tail -n 1 | awk '{ print $2 }') + 50))
  for i in 0 1 2; do
    wait_for "$TMP/agent$i.out" "^[0-9.]+ step $after .*invariants ok$" 60 ||
      fail "agent $i did not reach step $after after the fuzz"
  done
  echo "every agent reached step $after after the fuzz"
}

# The same against a parameter-server job: a DGS server (gradex-agent --role
# server) and two PsWorker processes; every process is alive after, and each
# worker steps on.
scenario_listener_fuzz_dgs() {
  local out w pids=() before
  [[ -x "$PS_WORKER" ]] || fail "listener-fuzz-dgs needs PS_WORKER_RANK as the 5th argument"
  cat >"$TMP/job.json" <<JSON
{"job_id": "$JOB", "world_size": 2, "max_world_size": 2, "algorithm": "dgs", "density": 0.05,
 "lease_ms": 3000, "entry_timeout_ms": 20000, "rendezvous_timeout_ms": 60000,
 "ps": {"servers": 1, "layer_sizes": [3000, 1000]}}
JSON
  start_coordinator coordinator
  "$AGENT" --role server --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" \
    --token-file "$TMP/token" --agent-id ps-server --ucx-tls "$UCX_TLS_E2E" \
    --metrics-port "$(free_port)" --join-timeout-ms 60000 > >(stamp >"$TMP/server.log") 2>&1 &
  AGENT_PID[server]=$!
  E2E_PIDS+=("$!")
  for w in 0 1; do
    UCX_TLS=$UCX_TLS_E2E "$PS_WORKER" --coordinator "127.0.0.1:$COORD_PORT" \
      --token-file "$TMP/token" --job "$JOB" --rank "$w" --world 2 --steps 1000000 --step-ms 10 \
      --timeout-ms 3000 > >(stamp >"$TMP/w$w.log") 2>&1 &
    AGENT_PID[w$w]=$!
    E2E_PIDS+=("$!")
  done
  for w in 0 1; do
    wait_for "$TMP/w$w.log" '^[0-9.]+ step 20 ' 90 || fail "worker $w never reached step 20"
  done
  out=$(hostile fuzz-ports "${FUZZ_CONNECTIONS:-1000}" "${FUZZ_SECONDS:-3}" "$COORD_PID" \
    "${AGENT_PID[server]}" "${AGENT_PID[w0]}" "${AGENT_PID[w1]}")
  echo "$out"
  kill -0 "$COORD_PID" || fail "the coordinator died under the fuzz"
  for w in server w0 w1; do kill -0 "${AGENT_PID[$w]}" || fail "$w died under the fuzz"; done
  (($(grep -c "connections" <<<"$out") >= 5)) || fail "expected at least 5 listening ports (coordinator 2, server 2+, workers), got: $out"
  for w in 0 1; do
    before=$(grep -cE '^[0-9.]+ step ' "$TMP/w$w.log")
    wait_for "$TMP/w$w.log" "^[0-9.]+ step $((before + 20)) " 60 ||
      fail "worker $w did not step 20 more times after the fuzz"
  done
  echo "both workers stepped 20 more times after the fuzz"
}

# A member flooding tags no schedule receives (agent 2, --debug-tag-flood:
# 64 KiB messages, 256 MiB to each peer per epoch): an honest agent blames it
# past its cap (64 MiB) and fails the step naming it, the coordinator evicts
# it as for a bad frame, the honest agents' memory stays bounded and they
# finish every step. Before: UCX kept every message (an honest agent grew to
# 1.46 GB).
scenario_tag_flood() {
  local i a line epoch blamed flooder rss max=0 n
  AGENT_EXTRA[2]="--debug-tag-flood 256"
  write_config "$TMP/job.json" job_id="$JOB" algorithm=spardl-bsag density=0.01 \
    barrier_period=16 plan_lead_steps=16 step_deadline_ms=5000 world_size=3 max_world_size=3 \
    teams=1 lease_ms=2000
  start_coordinator coordinator
  for i in 0 1 2; do start_agent "$i" ${AGENT_EXTRA[$i]:-}; done
  # The honest agents' RSS, sampled until the flooder is blamed and evicted
  # (the one it sends most to blames it first).
  for ((i = 0; i < 600; ++i)); do
    for a in 0 1; do
      rss=$(awk '/^VmRSS/ { print $2 }' "/proc/${AGENT_PID[$a]}/status" 2>/dev/null || echo 0)
      ((rss > max)) && max=$rss
    done
    grep -q "evicted member [0-9]* (agent 'e2e-a2'" "$TMP/coordinator.log" && break
    sleep 0.1
  done
  ((i < 600)) || fail "the flooder was not evicted within 60 s"
  grep -qh "is blamed" "$TMP/agent0.err" "$TMP/agent1.err" || fail "no honest agent blamed the flooder"
  # Every blame names agent 2's rank in that epoch.
  n=0
  while IFS= read -r line; do
    epoch=$(sed -E 's/.* epoch ([0-9]+) .*/\1/' <<<"$line")
    blamed=$(sed -E 's/.*: peer ([0-9]+) is blamed.*/\1/' <<<"$line")
    flooder=$(grep -hoE "epoch $epoch rank [0-9]+" "$TMP/agent2.out" "$TMP/agent2.err" | head -1 | awk '{ print $4 }')
    [[ -n "$flooder" ]] || continue  # agent 2 logged nothing of that epoch
    [[ "$blamed" == "$flooder" ]] || fail "epoch $epoch: blamed peer $blamed, the flooder was rank $flooder: $line"
    n=$((n + 1))
  done < <(grep -h "is blamed" "$TMP/agent0.err" "$TMP/agent1.err")
  ((n >= 1)) || fail "no blame could be checked against agent 2's rank"
  grep -m1 -h "is blamed" "$TMP/agent0.err" "$TMP/agent1.err"
  grep -m1 "evicted member [0-9]* (agent 'e2e-a2'" "$TMP/coordinator.log"
  echo "honest agents' largest RSS until the eviction: ${max} kB"
  ((max < 300 * 1024)) || fail "an honest agent grew to $max kB under the flood"
  expect_all_exit_zero 180 0 1
  for i in 0 1; do expect_finished "$i" "[23]"; done
}

# One WatchPlan stream per member: a member opening 20,000 streams (each held
# open) ends with one open; the others end ABORTED naming the newer stream,
# and the coordinator's memory stays flat (before: all 20,000 stayed open,
# RSS 17 -> 128 MB).
scenario_watch_flood() {
  local out rss0 rss_open rss1 pid
  start_job 3 lease_ms=60000 entry_timeout_ms=60000  # the watcher never heartbeats
  rss0=$(awk '/^VmRSS/ { print $2 }' "/proc/$COORD_PID/status")
  hostile watch-flood 20000 >"$TMP/watch.out" &
  pid=$!
  E2E_PIDS+=("$pid")
  wait_for "$TMP/watch.out" "streams opened" 180 || fail "the watch flood did not finish opening in 180 s"
  rss_open=$(awk '/^VmRSS/ { print $2 }' "/proc/$COORD_PID/status")
  wait_pid "$pid" 120 || fail "the watch flood did not end"
  rss1=$(awk '/^VmRSS/ { print $2 }' "/proc/$COORD_PID/status")
  out=$(cat "$TMP/watch.out")
  echo "$out"
  echo "coordinator RSS ${rss0} kB before the flood, ${rss_open} kB with its streams open, ${rss1} kB after"
  expect_line "$out" "^watch-flood: 20000 streams opened, 0 without a plan$"
  expect_line "$out" "^watch-flood: code 10: 19999 streams$"
  expect_line "$out" "^watch-flood: code 1: 1 streams$"
  expect_line "$out" "^watch-flood: last ended by the coordinator: a newer WatchPlan stream of member [0-9]+ replaced this one"
  ((rss_open - rss0 < 20000)) || fail "the coordinator grew by $((rss_open - rss0)) kB with the streams open"
  ((rss1 - rss0 < 20000)) || fail "the coordinator grew by $((rss1 - rss0)) kB after the flood"
  finish_job 3 3
}

# The coordinator stays reachable under fd exhaustion: its fd limit lowered
# to 1024, a token-less outsider opens 1,100 TCP connections to its port and
# holds them, silent, for 15 s. The coordinator keeps its descriptors under a
# cap below the limit (connections past it are closed at once, counted and
# logged), closes the rest at its handshake timeout (10 s); a late joiner
# after the outsider went is admitted, and the job's agents finish every
# step (before: accept4 failed with EMFILE, the listener never accepted
# again, and a late joiner gave up).
scenario_fd_exhaustion() {
  local out
  STEPS=${HOSTILE_STEPS:-1000}  # the job runs through the attack
  start_job 3 lease_ms=3000
  prlimit --nofile=1024:1024 --pid "$COORD_PID" || fail "cannot lower the coordinator's fd limit"
  out=$(hostile idle-connections 1100 15)
  echo "$out"
  expect_line "$out" "^idle-connections: 1100 connected"
  # Past the handshake timeout (10 s) every silent connection was closed.
  expect_line "$out" "^idle-connections: 1100 of 1100 closed by the coordinator within 15 s"
  kill -0 "$COORD_PID" || fail "the coordinator died"
  # A late joiner (pending: the job holds its 3) is admitted at once.
  out=$(hostile flood 1)
  expect_line "$out" "^flood: code 0: 1 joins$"
  wait_for "$TMP/coordinator.log" "listener: closed [1-9][0-9]* connections over the descriptor cap" 5 ||
    fail "the coordinator did not say it closed connections over its cap"
  grep -m1 "listener: closed" "$TMP/coordinator.log"
  ! grep -q "Failed accept4" "$TMP/coordinator.log" || fail "gRPC's listener saw an accept4 failure"
  curl -sf --max-time 10 "http://127.0.0.1:$COORD_METRICS/metrics" |
    grep -E '^gradex_coordinator_connections_refused_total\{reason="over_cap"\} [1-9]' ||
    fail "gradex_coordinator_connections_refused_total{reason=over_cap} did not count them"
  finish_job 3 3
}

# Slow clients cannot block scrapes: two clients connect to the
# coordinator's metrics port and send only the first line of a request;
# four scrapes, each given 2 s, are all answered, and the slow clients are
# disconnected at the request timeout (3 s) (before: prometheus-cpp served
# with 2 threads and civetweb's 30 s timeout, and 3 of 4 scrapes timed out).
scenario_slow_scrape() {
  local ok=0 i fd1 fd2 t0 rc=0 page
  start_job 3 lease_ms=3000
  exec {fd1}<>"/dev/tcp/127.0.0.1/$COORD_METRICS"
  exec {fd2}<>"/dev/tcp/127.0.0.1/$COORD_METRICS"
  t0=$(now)
  printf 'GET /metrics HTTP/1.1\r\n' >&"$fd1"
  printf 'GET /metrics HTTP/1.1\r\n' >&"$fd2"
  sleep 0.2
  for i in 1 2 3 4; do
    # Read whole, then matched (grep -q closing the pipe early would fail curl).
    page=$(curl -sf --max-time 2 "http://127.0.0.1:$COORD_METRICS/metrics" || true)
    if grep -q '^gradex_coordinator_epoch ' <<<"$page"; then ok=$((ok + 1)); fi
  done
  echo "$ok of 4 scrapes answered within 2 s each with 2 slow clients connected"
  ((ok == 4)) || fail "$((4 - ok)) of 4 scrapes timed out behind 2 slow clients"
  # The slow client's connection ends (EOF) rather than staying open.
  for (( ; ; )); do IFS= read -r -t 10 _ <&"$fd1" || { rc=$? && break; }; done
  echo "a slow client was disconnected $(awk -v a="$(now)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') s after it connected"
  ((rc == 1)) || fail "a slow client was still connected 10 s later"
  exec {fd1}>&- {fd2}>&-
  finish_job 3 3
}

case "$SCENARIO" in
  bad-address) scenario_bad_address ;;
  bounds) scenario_bounds ;;
  flood) scenario_flood ;;
  idle) scenario_idle ;;
  impersonate) scenario_impersonate ;;
  sigstop) scenario_sigstop ;;
  sigstop-two) scenario_sigstop_two ;;
  wireup-stall) scenario_wireup_stall ;;
  takeover) scenario_takeover ;;
  watch-flood) scenario_watch_flood ;;
  fd-exhaustion) scenario_fd_exhaustion ;;
  slow-scrape) scenario_slow_scrape ;;
  listener-fuzz) scenario_listener_fuzz ;;
  listener-fuzz-dgs) scenario_listener_fuzz_dgs ;;
  tag-flood) scenario_tag_flood ;;
  *) fail "unknown scenario $SCENARIO" ;;
esac
echo "PASS: $SCENARIO"
