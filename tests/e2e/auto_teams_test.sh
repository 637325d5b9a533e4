#!/usr/bin/env bash
# End to end: JobConfig.auto_teams. A coordinator and 4 gradex-agent processes
# over UCX; the agents probe their links at the epoch's start, the coordinator
# chooses T from the measured α and β and switches it at a plan barrier inside
# the epoch, and every step before and after it passes the in-band invariants.
# usage: auto_teams_test.sh COORDINATOR AGENT
set -euo pipefail

COORDINATOR=$1
AGENT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/gradex-e2e.XXXXXX")
# shellcheck source=tests/e2e/lib.sh
source "$HERE/lib.sh"
trap cleanup EXIT

JOB=e2e-auto-teams
ELEMENTS=100003
STEPS=64
UCX_TLS_E2E=${GRADEX_E2E_UCX_TLS:-tcp}
COORD_PORT=$(free_port)
COORD_METRICS=$(free_port)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
T0=$(now)

# T=1 to start with; at n = 100003 and density 1e-4 a message holds ~80 B,
# so any real link is latency-bound and the model picks T = P = 4 (fewer messages).
P=4
write_config "$TMP/job.json" job_id="$JOB" algorithm=spardl-bsag density=0.0001 world_size=$P \
  teams=1 auto_teams=true barrier_period=16 plan_lead_steps=16 step_deadline_ms=5000 lease_ms=3000
start_coordinator coordinator
# Reports sent at once (no batching linger), so the choice lands early in the
# 64 steps and its barrier comes before the end.
for ((i = 0; i < P; ++i)); do start_agent "$i" --report-linger-ms 0; done
# Mid-run, once decided (the agents leave at the end, and the survivors'
# epochs choose again).
wait_for "$TMP/coordinator.log" "auto teams: .* over $P ranks" 90 ||
  fail "the coordinator never decided the team count"
# The decision is logged when the last link report arrives; the plan (and
# the teams gauge with it) is published at the coordinator's next tick.
for ((try = 0; try < 50; ++try)); do
  metrics=$(curl -sf "http://127.0.0.1:$COORD_METRICS/metrics") || fail "no coordinator metrics"
  alpha=$(awk '$1 == "gradex_coordinator_link_alpha_seconds" {print $2}' <<<"$metrics")
  teams=$(awk '$1 == "gradex_coordinator_teams" {print $2}' <<<"$metrics")
  [[ "$teams" == 4 ]] && break
  sleep 0.1
done
awk -v a="$alpha" 'BEGIN{exit !(a > 0 && a < 10)}' || fail "link alpha gauge is '$alpha'"
[[ "$teams" == 4 ]] || fail "teams gauge is '$teams', expected 4"
expect_all_exit_zero 120 0 1 2 3
for ((i = 0; i < P; ++i)); do expect_finished "$i" "$P"; done
for ((i = 0; i < P; ++i)); do
  n=$(steps_of "$i" 'invariants ok$' | wc -l)
  ((n == STEPS)) || fail "agent $i checked $n steps, expected $STEPS"
  # One epoch throughout: T changed inside it, at a barrier.
  if steps_of "$i" | grep -vq " epoch 1 "; then fail "agent $i left epoch 1"; fi
done
line=$(grep -E "auto teams: .* over $P ranks" "$TMP/coordinator.log" | head -n 1) ||
  fail "the coordinator never decided the team count"
echo "coordinator: ${line#* }"
[[ "$line" == *"-> T=4 spardl-rsag at a plan barrier"* ]] ||
  fail "expected a switch to T=4 (latency-bound links): $line"
echo "PASS auto_teams in $(awk -v a="$(now)" -v b="$T0" 'BEGIN{printf "%.1f", a-b}') s"
