# Helpers of the end-to-end tests (sourced by e2e_test.sh): free ports, a
# coordinator and agents as child processes with time-stamped logs, bounded
# waits, cleanup of everything started.
# shellcheck shell=bash

E2E_PIDS=()

fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log; do
    [[ -f "$f" ]] || continue
    echo "--- $(basename "$f") (last 15 lines)" >&2
    tail -n 15 "$f" >&2
  done
  exit 1
}

cleanup() {
  local p
  for p in "${E2E_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${E2E_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  [[ -n "${KEEP_TMP:-}" ]] || rm -rf "$TMP"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

now() { echo "$EPOCHREALTIME"; }

# Prefixes every line with the time it was read (seconds since the epoch; no
# fork per line, so the log keeps up with the agent).
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }

# write_config FILE key=value... (numbers and booleans unquoted, the rest quoted)
write_config() {
  local file=$1 sep="" kv k v
  shift
  {
    printf '{'
    for kv in "$@"; do
      k=${kv%%=*}
      v=${kv#*=}
      if [[ "$v" =~ ^-?[0-9.]+$ || "$v" == true || "$v" == false ]]; then
        printf '%s"%s": %s' "$sep" "$k" "$v"
      else
        printf '%s"%s": "%s"' "$sep" "$k" "$v"
      fi
      sep=", "
    done
    printf '}\n'
  } >"$file"
}

# start_coordinator NAME: listens on $COORD_PORT, metrics on $COORD_METRICS.
start_coordinator() {
  local name=$1
  "$COORDINATOR" --job-config "$TMP/job.json" --listen "127.0.0.1:$COORD_PORT" \
    --metrics-port "$COORD_METRICS" --token-file "$TMP/token" \
    > >(stamp >"$TMP/$name.log") 2>&1 &
  COORD_PID=$!
  E2E_PIDS+=("$COORD_PID")
  # Agents started before it would wait for it (--join-timeout-s); the
  # scenarios time joins from this line.
  wait_for "$TMP/$name.log" "serving on" 30 || fail "$name is not serving after 30 s"
}

# wait_for is defined below; start_coordinator is only called after sourcing.
# start_agent I [extra flags]: agent aI, stdout -> agentI.out, stderr -> agentI.err.
declare -A AGENT_PID
start_agent() {
  local i=$1
  shift
  "$AGENT" --coordinator "127.0.0.1:$COORD_PORT" --job "$JOB" --token-file "$TMP/token" \
    --elements "$ELEMENTS" --steps "$STEPS" --agent-id "e2e-a$i" --local-rank "$i" \
    --ucx-tls "$UCX_TLS_E2E" --check-invariants --join-timeout-ms 60000 "$@" \
    > >(stamp >"$TMP/agent$i.out") 2> >(stamp >"$TMP/agent$i.err") &
  AGENT_PID[$i]=$!
  E2E_PIDS+=("$!")
}

# wait_pid PID SECONDS: its exit status, or fails when it outlives SECONDS.
wait_pid() {
  local pid=$1 limit=$2 end
  end=$((EPOCHSECONDS + limit))
  while kill -0 "$pid" 2>/dev/null; do
    if ((EPOCHSECONDS >= end)); then
      return 124
    fi
    sleep 0.1
  done
  wait "$pid"
}

# wait_for FILE REGEX SECONDS: until a line of FILE matches.
wait_for() {
  local file=$1 re=$2 limit=$3 end
  end=$((EPOCHSECONDS + limit))
  until [[ -f "$file" ]] && grep -Eq -- "$re" "$file"; do
    ((EPOCHSECONDS < end)) || return 1
    sleep 0.05
  done
}

# wait_progress FILE REGEX STALL_SECONDS: until a line of FILE matches, as
# long as FILE keeps growing (fails when it has not grown for STALL_SECONDS, or
# after 600 s in all). For long runs whose speed follows the machine's load: a
# stuck job fails as soon as it stops, a slow one is not mistaken for stuck.
wait_progress() {
  local file=$1 re=$2 stall=$3 size=-1 grown=$EPOCHSECONDS end=$((EPOCHSECONDS + 600)) now_size
  until [[ -f "$file" ]] && grep -Eq -- "$re" "$file"; do
    now_size=$(stat -c %s "$file" 2>/dev/null || echo 0)
    if ((now_size != size)); then
      size=$now_size
      grown=$EPOCHSECONDS
    fi
    ((EPOCHSECONDS - grown < stall && EPOCHSECONDS < end)) || return 1
    sleep 0.1
  done
}

# The progress lines of agent I (without time stamps) matching REGEX.
steps_of() { sed -E 's/^[0-9.]+ //' "$TMP/agent$1.out" | grep -E -- "${2:-^step }" || true; }

# Every listed agent exits 0 within SECONDS (total).
expect_all_exit_zero() {
  local limit=$1 i rc end
  shift
  end=$((EPOCHSECONDS + limit))
  for i in "$@"; do
    rc=0
    wait_pid "${AGENT_PID[$i]}" $((end - EPOCHSECONDS > 0 ? end - EPOCHSECONDS : 1)) || rc=$?
    ((rc == 0)) || fail "agent $i exited with $rc (124: still running after ${limit}s)"
  done
}

# Agent I's last line is step STEPS-1 with every invariant checked, and no
# line says a check was skipped.
expect_finished() {
  local i=$1 world=$2 last
  # The log is written by a stamp process that may trail the agent's exit.
  wait_for "$TMP/agent$i.out" "^[0-9.]+ step $((STEPS - 1)) " 10 || true
  last=$(steps_of "$i" | tail -n 1)
  [[ "$last" =~ ^step\ $((STEPS - 1))\ .*rank\ [0-9]+/$world\ .*invariants\ ok$ ]] ||
    fail "agent $i's last line is '$last', expected step $((STEPS - 1)) of $world ranks, invariants ok"
  if steps_of "$i" | grep -vq 'invariants ok$'; then fail "agent $i: a step without 'invariants ok'"; fi
}
