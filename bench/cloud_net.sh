#!/usr/bin/env bash
# Emulated cloud network benchmark: 4 network namespaces gx0..gx3, each joined
# to a bridge (in namespace gxbr) by a veth pair whose both directions are
# limited by tc tbf (default 1 Gbit/s). gradex-bench runs one rank per
# namespace over UCX TCP, pinned to the namespace's veth. For comparison the
# same job runs over plain UCX on this machine (shared memory, then TCP over
# lo). Only addresses created here (10.99.0.0/24, inside the namespaces) carry
# traffic; the root namespace's interfaces are not touched. Needs root.
#
# Usage: bench/cloud_net.sh [--rate 1gbit] [--iters 3] [--elements 25000000]
#                           [--density 0.01] [--out DIR] [--bin PATH] [--skip-local]
# Results: DIR/<setup>.jsonl, DIR/<setup>.txt (the tables) and DIR/summary.md.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rate=1gbit
iters=3
warmup=1
elements=25000000
density=0.01
out=$root/bench/results/cloud_net
bin=$root/build/bin/gradex-bench
local_runs=1
ranks=4
source "$root/bench/lib/common.sh"
gx_args cloud_net.sh raw:2,14 'unknown argument %s' \
  '--rate=rate --iters=iters --warmup=warmup --elements=elements --density=density --out=out
   --bin=bin --skip-local=local_runs=0' "$@"
gx_need_root
[[ -x $bin ]] || { echo "cloud_net.sh: $bin not built (run scripts/build)" >&2; exit 1; }
mkdir -p "$out"

DEV=gxeth  # the veth end inside every rank namespace has this same name
# Namespaces gx0..gx3 behind a bridge in gxbr, tbf both ways (bench/netns_lib.sh).
source "$root/bench/netns_lib.sh"

teardown() { gx_netns_down gx "$ranks"; }
trap teardown EXIT
trap 'exit 130' INT TERM
teardown  # leftovers of an aborted run

setup() {
  gx_netns_up gx "$ranks" "$rate" 10.99.0
  ip -n gx0 -brief addr show "$DEV" >&2
}

common=(--algo dense-ring,spardl,spardl-rsag,spardl-bsag --ranks "$ranks" --teams 2
  --elements "$elements" --density "$density" --iters "$iters" --warmup "$warmup"
  --transport ucx --deadline-ms 300000 --timeout-s 3600)

run() {  # run LABEL [env...] -- [extra flags...]
  local label=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  rm -f "$out/$label.jsonl"
  echo "== $label" >&2
  env "${envs[@]}" "$bin" "${common[@]}" --json-out "$out/$label.jsonl" "$@" | tee "$out/$label.txt"
}

setup
run "netns-tcp-$rate" UCX_TLS=tcp UCX_NET_DEVICES=$DEV -- --rank-wrapper "$root/bench/in_netns gx%d"
teardown
if [[ $local_runs -eq 1 ]]; then
  run local-ucx-shm UCX_TLS=sm,self --
  run local-ucx-tcp-lo UCX_TLS=tcp UCX_NET_DEVICES=lo --
fi

# summary.md: one row per (setup, algorithm), speed-up against dense-ring.
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$2"; }
{
  echo "# gradex-bench: P=$ranks, N=$elements, density $density, $iters timed calls"
  echo
  echo "Machine: $(nproc) cores, $(uname -m), $(. /etc/os-release && echo "$PRETTY_NAME"). $(date -u +%F)"
  echo
  echo "| setup | algorithm | teams | median ms | p90 ms | MB sent/rank | busbw GB/s | vs dense-ring | invariants |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for f in "$out"/*.jsonl; do
    [[ -f $f ]] || continue
    label=$(basename "$f" .jsonl)
    dense=""
    while IFS= read -r line; do
      [[ $(field algo "$line") == dense-ring ]] && dense=$(field median_s "$line")
    done <"$f"
    while IFS= read -r line; do
      med=$(field median_s "$line")
      speed="-"
      [[ -n $dense ]] && speed=$(awk -v d="$dense" -v m="$med" 'BEGIN{printf "%.1fx", d/m}')
      inv=$([[ $(field consistent "$line") == true ]] && echo "consistent, err $(field conservation_max_abs_err "$line")" || echo INCONSISTENT)
      awk -v l="$label" -v a="$(field algo "$line")" -v t="$(field teams "$line")" -v m="$med" \
        -v p="$(field p90_s "$line")" -v s="$(field sent_bytes_per_rank "$line")" \
        -v b="$(field busbw_gbps "$line")" -v x="$speed" -v i="$inv" \
        'BEGIN{printf "| %s | %s | %s | %.1f | %.1f | %.1f | %.3f | %s | %s |\n", l, a, t, m*1e3, p*1e3, s/1e6, b, x, i}'
    done <"$f"
  done
} >"$out/summary.md"
cat "$out/summary.md"
