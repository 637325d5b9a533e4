# shellcheck shell=bash
# Emulated cloud network of network namespaces (sourced by bench/compare).
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
