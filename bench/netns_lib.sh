# shellcheck shell=bash
# Emulated cloud network of network namespaces (sourced by bench/compare,
# bench/train_step, bench/dgs).
#
# gx_netns_up PREFIX COUNT RATE NET [HOSTPORT]
#   Namespaces PREFIX0 .. PREFIX<COUNT-1>, each with a veth named gxeth (the
#   same name everywhere, so UCX_NET_DEVICES=gxeth fits every rank) holding
#   NET.<r+1>/24, plugged into a bridge in namespace PREFIXbr. Both directions
#   of every rank's link are limited by tc tbf to RATE (tc syntax: 1gbit): a
#   VM's NIC cap, with the switch itself unlimited.
#   HOSTPORT=1 also plugs the root namespace into the bridge (veth PREFIXh,
#   NET.254, no rate limit) for launcher control traffic such as Open MPI's
#   daemons; rank-to-rank data never takes it (it is not a rank's address).
# gx_netns_down PREFIX COUNT
#   Kills what still runs in those namespaces and deletes them (the veths and
#   the bridge go with them). Safe to call when nothing exists.
#
# Only interfaces and addresses created here carry traffic; nothing else in
# the root namespace is touched. NET must be a /24 nobody else uses (e.g.
# 10.98.0). Needs root.

gx_netns_burst() {  # tbf bucket: >= 1 ms at the rate, and >= 512 KB
  local rate=$1 num unit bits
  num=${rate%%[a-zA-Z]*}
  unit=${rate#"$num"}
  case $unit in
    gbit) bits=$(awk -v x="$num" 'BEGIN{printf "%d", x*1e9}') ;;
    mbit) bits=$(awk -v x="$num" 'BEGIN{printf "%d", x*1e6}') ;;
    *) echo 512kb; return ;;
  esac
  awk -v b="$bits" 'BEGIN{k=b/8/1000/1024; if (k<512) k=512; printf "%dkb", k}'
}

gx_netns_up() {
  local prefix=$1 count=$2 rate=$3 net=$4 hostport=${5:-0}
  local br_ns=${prefix}br burst r ns
  burst=$(gx_netns_burst "$rate")
  ip netns add "$br_ns"
  ip -n "$br_ns" link add br0 type bridge
  ip -n "$br_ns" link set br0 up
  for ((r = 0; r < count; r++)); do
    ns=$prefix$r
    ip netns add "$ns"
    ip link add "${prefix}v$r" netns "$ns" type veth peer name "${prefix}b$r" netns "$br_ns"
    ip -n "$ns" link set "${prefix}v$r" name gxeth
    ip -n "$ns" addr add "$net.$((r + 1))/24" dev gxeth
    ip -n "$ns" link set lo up
    ip -n "$ns" link set gxeth up
    ip -n "$br_ns" link set "${prefix}b$r" master br0
    ip -n "$br_ns" link set "${prefix}b$r" up
    # Both directions: rank -> switch and switch -> rank.
    tc -n "$ns" qdisc add dev gxeth root tbf rate "$rate" burst "$burst" latency 50ms
    tc -n "$br_ns" qdisc add dev "${prefix}b$r" root tbf rate "$rate" burst "$burst" latency 50ms
  done
  if [[ $hostport == 1 ]]; then
    ip link add "${prefix}h" type veth peer name "${prefix}bh" netns "$br_ns"
    ip addr add "$net.254/24" dev "${prefix}h"
    ip link set "${prefix}h" up
    ip -n "$br_ns" link set "${prefix}bh" master br0
    ip -n "$br_ns" link set "${prefix}bh" up
  fi
}

gx_netns_down() {
  local prefix=$1 count=$2 r ns pid
  for ((r = 0; r <= count; r++)); do
    ns=$prefix$r
    ((r == count)) && ns=${prefix}br
    ip netns list | grep -qw "$ns" || continue
    # Processes left in our own namespaces by an interrupted run.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # The host port's root end, if the bridge namespace did not take it along.
  ip link del "${prefix}h" 2>/dev/null || true
}

# gx_rank_exec PREFIX NET RANKS R PORT [VAR=VALUE...] CMD...: runs CMD in rank
# R's namespace with what a torch.distributed + gradex rank needs there:
# RANK/WORLD_SIZE, torch's store on rank 0's address (NET.1:PORT), gloo and
# UCX on gxeth over TCP, gradex's data IP and coordinator host, one OpenMP
# thread. Leading VAR=VALUE words are added to that environment. Run it in
# the background (`gx_rank_exec ... >log 2>&1 &`): it execs, so $! is the
# rank's process, which the caller's kill and wait reach.
gx_rank_exec() {
  local prefix=$1 net=$2 ranks=$3 r=$4 port=$5
  shift 5
  exec ip netns exec "$prefix$r" env RANK="$r" LOCAL_RANK=0 WORLD_SIZE="$ranks" LOCAL_WORLD_SIZE=1 \
    MASTER_ADDR="$net.1" MASTER_PORT="$port" GLOO_SOCKET_IFNAME=gxeth \
    GRADEX_DATA_IP="$net.$((r + 1))" GRADEX_COORDINATOR_HOST="$net.1" \
    UCX_TLS=tcp UCX_NET_DEVICES=gxeth UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1 "$@"
}

# gx_wait_all PID...: waits for every PID; returns the first non-zero status.
gx_wait_all() {
  local p rc status=0
  for p in "$@"; do
    rc=0
    wait "$p" || rc=$?
    [[ $status -eq 0 && $rc -ne 0 ]] && status=$rc
  done
  return "$status"
}

# gx_bench_begin PREFIX RANKS OUT TAG: how a namespace bench starts. The
# namespaces go at exit (teardown, also callable), and any an aborted run
# left go now; INT/TERM send TERM to the ranks in the global array `pids`;
# OUT/raw is emptied; say() logs "[TAG hh:mm:ss] ..." to stderr and to
# OUT/raw/progress.log.
# (teardown and say are defined here, not when this file is sourced: other
# sourcing scripts have their own.)
gx_bench_begin() {
  GX_BENCH_PREFIX=$1 GX_BENCH_RANKS=$2 GX_BENCH_OUT=$3 GX_BENCH_TAG=$4
  teardown() { gx_netns_down "$GX_BENCH_PREFIX" "$GX_BENCH_RANKS"; }
  say() { echo "[$GX_BENCH_TAG $(date -u +%H:%M:%S)] $*" | tee -a "$GX_BENCH_OUT/raw/progress.log" >&2; }
  pids=()
  trap teardown EXIT
  trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; exit 130' INT TERM
  teardown
  mkdir -p "$GX_BENCH_OUT/raw"
  rm -f "$GX_BENCH_OUT"/raw/*
}
