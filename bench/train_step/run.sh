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
source "$root/bench/lib/common.sh"
gx_args train_step 2,16 'unknown argument %s (see --help)' \
  '--modes=modes --rounds=rounds --steps=steps --warmup=warmup --batch=batch --density=density
   --rate=rate --bench-iters=bench_iters --no-bare=bare=0 --build-dir=build:path
   --out=out:path' "$@"
gx_positive_ints rounds steps warmup batch bench_iters
gx_check_rate "$rate"
gx_modes "$modes" '^(ddp|compute|gradex:[a-z0-9-]+)$'
gx_need_root
bench=$build/bin/gradex-bench
gx_need_gradex "$build" __init__.py
[[ $bare == 0 || -x $bench ]] || die "$bench not built (scripts/build)"
"$py" -c 'import torch' 2>/dev/null || die "$py has no torch (apt-get install python3-torch)"

source "$root/bench/machine_load.sh"
gx_netns_bench "$PREFIX" "$RANKS" "$rate" "$NET" "$out" train_step
echo "$RANKS ranks, tc tbf $rate both ways per rank; $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')); $(. /etc/os-release && echo "$PRETTY_NAME"); torch $("$py" -c 'import torch; print(torch.__version__)'); $(date -u +%FT%TZ); source $(gx_source_version "$root"); batch $batch, $warmup warm-up + $steps timed steps per run, $rounds rounds of: ${MODES[*]}" >"$out/raw/meta.txt"

port=29600
run_mode() {  # run_mode MODE TAG: one training job, 4 ranks in their namespaces
  local mode=$1 tag=$2
  port=$((port + 1))
  gx_run_ranks "$PREFIX" "$NET" "$RANKS" "$port" "$out/raw/$tag" PYTHONPATH="$build/python" \
    GRADEX_TIMELINE="$out/raw/$tag.timeline.json" \
    timeout 900 "$py" "$here/train_step.py" --mode "$mode" --steps "$steps" \
    --warmup "$warmup" --batch "$batch" --density "$density" --out "$out/raw" --tag "$tag"
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
