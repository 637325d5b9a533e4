#!/usr/bin/env bash
# The hierarchical exchange on emulated nodes with ONE link each: every node
# is a network namespace (bench/netns_lib.sh) holding all of its L ranks,
# which reach each other over the namespace's own address (the kernel's
# loopback path), and reach other nodes through the namespace's one veth to a
# bridge, limited both ways by tc tbf to the node link's rate. gradex-bench
# runs the ranks over UCX TCP, --ranks-per-node L, each node's ranks in its
# namespace (--rank-wrapper 'in_netns PREFIX%n').
#
# 1. Bytes leaving a node per step, for each layout (NxL) and rate:
#    (a) the flat exchange with L ranks a node (--hierarchy off),
#    (b) the hierarchical one,
#    (c) the flat one-rank-per-node job (N ranks, one a namespace),
#    read from the nodes' veth tx byte counters (wire bytes: TCP/IP headers,
#    acks and gradex's frames included). Each is the difference of two runs
#    that differ only in --iters (by --steps), divided by --steps: start-up,
#    warm-up and the invariant checks cancel. Prints (a)/(c) and (b)/(c).
# 2. Step time where the node link is the limit (--time-layout, --time-rate,
#    --time-elements): flat vs hierarchical (and the dense ring, DDP's
#    allreduce, flat), interleaved over --rounds, gradex-bench's median over
#    the timed calls of each run (a call's time is its slowest rank's).
#
# Usage: bench/hierarchy/run.sh [--layouts 2x4,4x2] [--rates 1gbit,10gbit]
#          [--elements 2000000] [--steps 8] [--algo spardl-bsag] [--density 0.01] [--teams T]
#          [--time-layout 2x4] [--time-rate 100mbit] [--time-elements 6000000]
#          [--time-iters 6] [--rounds 2] [--no-dense] [--skip-bytes] [--skip-time]
#          [--bin PATH] [--out DIR]   (default bench/results/hierarchy)
# Writes OUT/bytes.csv, OUT/time.csv, OUT/summary.md and the raw runs in
# OUT/raw. Traffic: only 10.94.0.0/24 on interfaces created here (namespaces
# gxhi0..gxhi3 and gxhibr); the root namespace is not touched. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
layouts=2x4,4x2 rates=1gbit,10gbit elements=2000000 steps=8 algo=spardl-bsag density=0.01 teams=
time_layout=2x4 time_rate=100mbit time_elements=6000000 time_iters=6 rounds=2 dense=1
do_bytes=1 do_time=1
bin=$root/build/bin/gradex-bench
out=$root/bench/results/hierarchy
PREFIX=gxhi NET=10.94.0 NODES_MAX=4
source "$root/bench/lib/common.sh"
gx_args hierarchy/run.sh 2,30 'unknown argument %s (see --help)' \
  '--layouts=layouts --rates=rates --elements=elements --steps=steps --algo=algo
   --density=density --teams=teams --time-layout=time_layout --time-rate=time_rate
   --time-elements=time_elements --time-iters=time_iters --rounds=rounds --no-dense=dense=0
   --skip-bytes=do_bytes=0 --skip-time=do_time=0 --bin=bin:path --out=out:path' "$@"
gx_positive_ints elements steps time_elements time_iters rounds
# B-SAG's teams (default 2 where they divide the ranks) are consecutive ranks:
# with as many teams as nodes the flat exchange is already split by node.
teams_flag=()
if [[ -n $teams ]]; then
  gx_positive_ints teams
  teams_flag=(--teams "$teams")
fi
IFS=, read -r -a LAYOUTS <<<"$layouts"
IFS=, read -r -a RATES <<<"$rates"
for l in "${LAYOUTS[@]}" "$time_layout"; do
  if ! [[ $l =~ ^([1-9])x([1-9][0-9]*)$ ]] || ((BASH_REMATCH[1] > NODES_MAX)); then
    die "bad layout '$l' (NODESxRANKS, at most $NODES_MAX nodes, e.g. 2x4)"
  fi
done
for r in "${RATES[@]}" "$time_rate"; do gx_check_rate "$r"; done
gx_need_root
[[ -x $bin ]] || die "$bin not built (scripts/build)"

gx_netns_bench "$PREFIX" "$NODES_MAX" "${RATES[0]}" "$NET" "$out" hierarchy
echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); $(. /etc/os-release && echo "$PRETTY_NAME"); $(date -u +%FT%TZ); source $(gx_source_version "$root"); $algo at density $density, teams ${teams:-default}" >"$out/raw/meta.txt"
cat "$out/raw/meta.txt" >&2
current_rate=${RATES[0]}
links() {  # links RATE: the namespaces again, behind links of RATE
  [[ $1 == "$current_rate" ]] && return 0
  teardown
  gx_netns_up "$PREFIX" "$NODES_MAX" "$1" "$NET"
  current_rate=$1
}

tx_total() {  # tx_total NODES: bytes sent so far by the first NODES nodes' links
  local n sum=0
  for ((n = 0; n < $1; n++)); do
    sum=$((sum + $(ip netns exec "$PREFIX$n" cat /sys/class/net/gxeth/statistics/tx_bytes)))
  done
  echo "$sum"
}

field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$2"; }

# bench TAG RANKS ELEMENTS ITERS [flags...]: one gradex-bench run, its ranks in
# their nodes' namespaces; its JSON line on stdout, its table in raw/TAG.txt.
bench() {
  local tag=$1 ranks=$2 n=$3 iters=$4
  shift 4
  rm -f "$out/raw/$tag.jsonl"
  env UCX_TLS=tcp UCX_NET_DEVICES=gxeth UCX_WARN_UNUSED_ENV_VARS=n "$bin" --algo "$algo" \
    --ranks "$ranks" --elements "$n" --density "$density" --iters "$iters" --warmup 1 \
    --transport ucx --rank-wrapper "$root/bench/in_netns $PREFIX%n" --deadline-ms 300000 \
    --timeout-s 900 --quiet --json-out "$out/raw/$tag.jsonl" "${teams_flag[@]}" "$@" >"$out/raw/$tag.txt" 2>&1 ||
    { cat "$out/raw/$tag.txt" >&2; die "gradex-bench failed ($tag)"; }
  tail -n 1 "$out/raw/$tag.jsonl"
}

# per_step TAG NODES RANKS [flags...]: bytes leaving a node per step, the
# mean over the nodes, and the run's JSON line: "BYTES<TAB>JSON".
per_step() {
  local tag=$1 nodes=$2 ranks=$3 t0 t1 t2 j
  shift 3
  t0=$(tx_total "$nodes")
  bench "$tag-short" "$ranks" "$elements" 1 "$@" >/dev/null
  t1=$(tx_total "$nodes")
  j=$(bench "$tag-long" "$ranks" "$elements" $((1 + steps)) "$@")
  t2=$(tx_total "$nodes")
  printf '%s\t%s\n' "$(awk -v a=$((t1 - t0)) -v b=$((t2 - t1)) -v s="$steps" -v n="$nodes" \
    'BEGIN{printf "%.0f", (b - a) / s / n}')" "$j"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a / b}'; }

if [[ $do_bytes == 1 ]]; then
  echo "layout,rate,flat_L_bytes,hier_bytes,flat_1_bytes,flat_L_over_1,hier_over_1,hier_app_bytes,flat_1_app_bytes" >"$out/bytes.csv"
  for rate in "${RATES[@]}"; do
    links "$rate"
    for l in "${LAYOUTS[@]}"; do
      nodes=${l%x*} per=${l#*x} ranks=$((${l%x*} * ${l#*x}))
      say "$l at $rate: (a) flat, $per ranks a node"
      r=$(per_step "bytes-$l-$rate-flat" "$nodes" "$ranks" --ranks-per-node "$per" --hierarchy off)
      a=${r%%$'\t'*} ja=${r#*$'\t'}
      say "$l at $rate: (b) hierarchical"
      r=$(per_step "bytes-$l-$rate-hier" "$nodes" "$ranks" --ranks-per-node "$per")
      b=${r%%$'\t'*} jb=${r#*$'\t'}
      [[ $(field hierarchy_nodes "$jb") == "$nodes" ]] || die "$l at $rate did not run hierarchical"
      say "$l at $rate: (c) flat, one rank a node ($nodes ranks)"
      r=$(per_step "bytes-$l-$rate-one" "$nodes" "$nodes")
      c=${r%%$'\t'*} jc=${r#*$'\t'}
      for j in "$ja" "$jb" "$jc"; do
        [[ $(field consistent "$j") == true ]] || die "$l at $rate: inconsistent result: $j"
      done
      # What gradex itself counted leaving a node: L ranks' inter-node bytes.
      happ=$(awk -v x="$(field inter_node_sent_bytes "$jb")" -v l="$per" 'BEGIN{printf "%.0f", x * l}')
      capp=$(field sent_bytes_per_rank "$jc")
      say "$l at $rate: bytes leaving a node per step: (a) $a, (b) $b, (c) $c; (a)/(c) $(ratio "$a" "$c"), (b)/(c) $(ratio "$b" "$c")"
      echo "$l,$rate,$a,$b,$c,$(ratio "$a" "$c"),$(ratio "$b" "$c"),$happ,$capp" >>"$out/bytes.csv"
    done
  done
fi

if [[ $do_time == 1 ]]; then
  links "$time_rate"
  nodes=${time_layout%x*} per=${time_layout#*x} ranks=$((nodes * per))
  echo "mode,round,median_s,p90_s,inter_node_s,intra_node_s" >"$out/time.csv"
  modes=(flat hier)
  [[ $dense == 1 ]] && modes+=(dense-ring)
  for ((round = 1; round <= rounds; round++)); do
    for mode in "${modes[@]}"; do
      say "step time, $time_layout at $time_rate, N=$time_elements: $mode, round $round/$rounds"
      case $mode in
        flat) flags=(--hierarchy off) ;;
        hier) flags=() ;;
        dense-ring) flags=(--hierarchy off --algo dense-ring) ;;
      esac
      iters=$time_iters
      [[ $mode == dense-ring ]] && iters=$(((time_iters + 1) / 2))
      j=$(bench "time-$mode-$round" "$ranks" "$time_elements" "$iters" --ranks-per-node "$per" \
        "${flags[@]}")
      [[ $(field consistent "$j") == true ]] || die "step time $mode: inconsistent result: $j"
      echo "$mode,$round,$(field median_s "$j"),$(field p90_s "$j"),$(field inter_node_s "$j"),$(field intra_node_s "$j")" >>"$out/time.csv"
      say "  median $(field median_s "$j") s"
    done
  done
fi

med() {  # med MODE: median over rounds of the runs' medians
  awk -F, -v m="$1" '$1 == m {print $3}' "$out/time.csv" | sort -g |
    awk '{v[n++] = $1} END{printf "%.3f", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2}'
}
{
  echo "# Hierarchical exchange on a namespace cluster"
  echo
  cat "$out/raw/meta.txt"
  echo
  if [[ $do_bytes == 1 ]]; then
    echo "Bytes leaving a node per step (veth tx, mean over nodes; N=$elements a rank, $steps steps):"
    echo
    echo "| layout | link | (a) flat, L a node | (b) hierarchical | (c) flat, 1 a node | (a)/(c) | (b)/(c) |"
    echo "|---|---|---|---|---|---|---|"
    tail -n +2 "$out/bytes.csv" | while IFS=, read -r l rate a b c ac bc _ _; do
      echo "| $l | $rate | $a | $b | $c | $ac | $bc |"
    done
    echo
  fi
  if [[ $do_time == 1 ]]; then
    echo "Step time, $time_layout at $time_rate a node link, N=$time_elements a rank (median over rounds of each run's median over $time_iters calls):"
    echo
    echo "| mode | median s | vs flat |"
    echo "|---|---|---|"
    flat=$(med flat)
    for mode in "${modes[@]}"; do
      m=$(med "$mode")
      echo "| $mode | $m | $(ratio "$m" "$flat") |"
    done
  fi
} >"$out/summary.md"
cat "$out/summary.md"
