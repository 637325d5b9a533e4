#!/usr/bin/env bash
# Training step time on an emulated cloud network: 4 ranks, each in
# its own network namespace behind a tc-tbf-limited link (bench/netns_lib.sh,
# default 1 Gbit/s both ways), train the 25M-parameter MLP of model.py with
# torch DDP on CPU (gloo): DDP's default allreduce vs gradex's comm hook, the
# modes interleaved round by round (ABAB...). After each round the bare
# exchange (gradex-bench, same algorithm, bucket sizes and density, same
# namespaces) is timed, for the hook's overhead. Writes raw runs, steps.csv,
# summary.md under OUT (bench/train_step/report.py). Needs root.
#
# Usage: bench/train_step/run.sh [--modes ddp,gradex:spardl,gradex:auto,compute]
#          [--rounds 3] [--steps 6] [--warmup 2] [--batch 8] [--density 0.01]
#          [--rate 1gbit] [--bench-iters 5] [--no-bare] [--build-dir DIR]
#          [--out DIR]   (default bench/results/train_step)
# Traffic: only 10.97.0.0/24 on interfaces created here (namespaces gxts0..3
# and gxtsbr); the root namespace is not touched.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
modes=ddp,gradex:spardl,gradex:auto,compute
rounds=3 steps=6 warmup=2 batch=8 density=0.01 rate=1gbit bench_iters=5 bare=1
build=$root/build
out=$root/bench/results/train_step
PREFIX=gxts NET=10.97.0 RANKS=4
py=/usr/bin/python3  # Debian's, where python3-torch lives
die() { echo "train_step: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --modes) modes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --density) density=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --bench-iters) bench_iters=$2; shift 2 ;;
    --no-bare) bare=0; shift ;;
    --build-dir) build=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
for v in rounds steps warmup batch bench_iters; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v/_/-} must be a positive integer, got '${!v}'"
done
[[ $rate =~ ^[0-9.]+(gbit|mbit)$ ]] || die "bad --rate '$rate' (e.g. 1gbit, 500mbit)"
IFS=, read -r -a MODES <<<"$modes"
for m in "${MODES[@]}"; do
  [[ $m == ddp || $m == compute || $m =~ ^gradex:[a-z0-9-]+$ ]] || die "bad mode '$m'"
done
[[ $(id -u) -eq 0 ]] || { echo "train_step: needs root (network namespaces, tc)" >&2; exit 1; }
bench=$build/bin/gradex-bench
[[ -f $build/python/gradex/__init__.py ]] || die "$build/python/gradex not built (scripts/build)"
[[ $bare == 0 || -x $bench ]] || die "$bench not built (scripts/build)"
"$py" -c 'import torch' 2>/dev/null || die "$py has no torch (apt-get install python3-torch)"

source "$root/bench/netns_lib.sh"
gx_bench_begin "$PREFIX" "$RANKS" "$out" train_step

source "$root/bench/machine_load.sh"

gx_netns_up "$PREFIX" "$RANKS" "$rate" "$NET"
echo "$RANKS ranks, tc tbf $rate both ways per rank; $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); $(. /etc/os-release && echo "$PRETTY_NAME"); torch $("$py" -c 'import torch; print(torch.__version__)'); $(date -u +%FT%TZ); source $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown); batch $batch, $warmup warm-up + $steps timed steps per run, $rounds rounds of: ${MODES[*]}" >"$out/raw/meta.txt"

port=29600
run_mode() {  # run_mode MODE TAG: one training job, 4 ranks in their namespaces
  local mode=$1 tag=$2 r status=0
  port=$((port + 1))
  pids=()
  for ((r = 0; r < RANKS; r++)); do
    gx_rank_exec "$PREFIX" "$NET" "$RANKS" "$r" "$port" PYTHONPATH="$build/python" \
      GRADEX_TIMELINE="$out/raw/$tag.timeline.json" \
      timeout 900 "$py" "$here/train_step.py" --mode "$mode" --steps "$steps" \
      --warmup "$warmup" --batch "$batch" --density "$density" --out "$out/raw" --tag "$tag" \
      >"$out/raw/$tag.rank$r.log" 2>&1 &
    pids+=($!)
  done
  gx_wait_all "${pids[@]}" || status=$?
  pids=()
  return "$status"
}

run_bare() {  # run_bare ROUND: gradex-bench at every (algorithm, bucket size) the hook ran
  local rnd=$1 algo n teams
  "$py" "$here/report.py" --buckets "$out/raw" "$rnd" | while read -r algo n teams; do
    say "round $rnd: gradex-bench --algo $algo --elements $n --teams $teams"
    env UCX_TLS=tcp UCX_NET_DEVICES=gxeth UCX_WARN_UNUSED_ENV_VARS=n "$bench" --algo "$algo" \
      --teams "$teams" --ranks "$RANKS" --elements "$n" --density "$density" --iters "$bench_iters" --warmup 1 \
      --transport ucx --rank-wrapper "$here/../in_netns $PREFIX%d" --deadline-ms 300000 \
      --timeout-s 900 --quiet --json-out "$out/raw/bare-r$rnd.jsonl" \
      >>"$out/raw/bare-r$rnd.txt" 2>&1 || say "gradex-bench failed (raw/bare-r$rnd.txt)"
  done
}

t_start=$SECONDS
for ((rnd = 1; rnd <= rounds; rnd++)); do
  for m in "${MODES[@]}"; do
    tag=${m/:/-}-r$rnd
    machine_load >"$out/raw/$tag.load"
    say "round $rnd/$rounds: $m (load $(cat "$out/raw/$tag.load"))"
    t0=$SECONDS
    if run_mode "$m" "$tag"; then
      say "  done in $((SECONDS - t0)) s: $(grep -h 'median step' "$out/raw/$tag".rank*.log | sort | tr '\n' ';')"
    else
      say "  $m failed (exit); see raw/$tag.rank*.log"
    fi
  done
  if [[ $bare == 1 ]]; then run_bare "$rnd"; fi
done
teardown
"$py" "$here/report.py" "$out"
say "all done in $((SECONDS - t_start)) s: $out/summary.md"
