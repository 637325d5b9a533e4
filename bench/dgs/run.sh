#!/usr/bin/env bash
# DGS vs ASGD through gradex's parameter server (the paper's comparison): 4
# workers, each in its own network namespace behind a tc-tbf-limited link
# (bench/netns_lib.sh, default 1 Gbit/s both ways), step the 25.19M-parameter
# MLP of bench/train_step/model.py with gradex.torch.DGSOptimizer (no DDP) on
# a small synthetic batch: asgd (density 1) and dgs (density 0.01), and, for
# the synchronous anchor, ddp (bench/train_step/train_step.py's DDP + gloo
# allreduce); modes interleaved round by round. Rank 0 hosts the coordinator
# and the server shard in its process (PsWorker's single-job design), so its
# link carries every worker's push and pull. Then gradex-dgs-bench's worker
# step as processes over UCX (3 workers + server, 25M elements: the authors'
# setting) and the pure-PyTorch reference's. Writes raw runs and summary.md under OUT (report.py). Root.
#
# Usage: bench/dgs/run.sh [--modes asgd,dgs,ddp] [--rounds 2] [--steps 6]
#          [--warmup 2] [--batch 8] [--rate 1gbit] [--build-dir DIR] [--out DIR]
#          [--no-loopback]   (default OUT: bench/results/dgs)
# Traffic: only 10.96.0.0/24 on interfaces created here (namespaces gxdg0..3
# and gxdgbr); the root namespace is not touched.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
modes=asgd,dgs,ddp rounds=2 steps=6 warmup=2 batch=8 rate=1gbit loopback=1
build=$root/build
out=$root/bench/results/dgs
PREFIX=gxdg NET=10.96.0 RANKS=4
py=/usr/bin/python3
source "$root/bench/lib/common.sh"
gx_args "dgs bench" 2,18 'unknown argument %s (see --help)' \
  '--modes=modes --rounds=rounds --steps=steps --warmup=warmup --batch=batch --rate=rate
   --no-loopback=loopback=0 --build-dir=build:path --out=out:path' "$@"
gx_positive_ints rounds steps warmup batch
gx_check_rate "$rate"
gx_modes "$modes" '^(asgd|dgs|ddp)$'
gx_need_root
gx_need_gradex "$build" dgs.py
"$py" -c 'import torch' 2>/dev/null || die "$py has no torch (apt-get install python3-torch)"

gx_netns_bench "$PREFIX" "$RANKS" "$rate" "$NET" "$out" dgs
echo "$RANKS workers, tc tbf $rate both ways per worker, rank 0 hosting the server shard; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); torch $("$py" -c 'import torch; print(torch.__version__)'); $(date -u +%FT%TZ); source $(gx_source_version "$root"); batch $batch, $warmup warm-up + $steps timed steps per run, $rounds rounds of: ${MODES[*]}" >"$out/raw/meta.txt"

port=29700
run_mode() {  # run_mode MODE TAG
  local mode=$1 tag=$2 cmd
  port=$((port + 1))
  case $mode in
    asgd) cmd=("$here/dgs_step.py" --density 1) ;;
    dgs) cmd=("$here/dgs_step.py" --density 0.01) ;;
    ddp) cmd=("$root/bench/train_step/train_step.py" --mode ddp) ;;
  esac
  gx_run_ranks "$PREFIX" "$NET" "$RANKS" "$port" "$out/raw/$tag" PYTHONPATH="$build/python" \
    timeout 900 nice -n 10 "$py" "${cmd[@]}" --steps "$steps" --warmup "$warmup" \
    --batch "$batch" --out "$out/raw" --tag "$tag"
}

t_start=$SECONDS
for ((rnd = 1; rnd <= rounds; rnd++)); do
  for m in "${MODES[@]}"; do
    tag=$m-r$rnd
    say "round $rnd/$rounds: $m (load $(cut -d' ' -f1 /proc/loadavg))"
    if run_mode "$m" "$tag"; then
      say "  done: $(grep -h 'median step' "$out/raw/$tag".rank*.log | tr '\n' ';')"
    else
      say "  $m failed; see raw/$tag.rank*.log"
    fi
  done
done
teardown
if [[ $loopback == 1 ]]; then
  # The authors' setting: 3 workers + 1 server as processes on this machine,
  # 25M elements; /usr/bin/time adds the CPU seconds of all of them.
  for tls in tcp,self; do
    say "gradex-dgs-bench --transport ucx --tls $tls: 3 workers + 1 server, 25M elements"
    /usr/bin/time -f "cpu_s %U %S" -o "$out/raw/authors-setting.time" nice -n 10 \
      "$build/bin/gradex-dgs-bench" --transport ucx --tls "$tls" --workers 3 --steps 8 \
      --warmup 2 >"$out/raw/authors-setting.txt" 2>&1 || say "gradex-dgs-bench failed"
  done
  say "reference worker step (pure PyTorch), 3 workers + server"
  PYTHONPATH="$build/python" nice -n 10 "$py" "$here/reference_step.py" --steps 3 --warmup 1 \
    --json-out "$out/raw/reference_step.jsonl" >"$out/raw/reference_step.txt" 2>&1 \
    || say "reference_step failed"
fi
"$py" "$here/report.py" "$out"
say "all done in $((SECONDS - t_start)) s: $out/summary.md"
