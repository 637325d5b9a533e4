#!/usr/bin/env bash
# Training loss vs wall time behind emulated 1 Gbit/s links (the DGS
# seed's low-bandwidth figure): 4 workers, each in its own network namespace
# behind a tc-tbf link (bench/netns_lib.sh), train Fashion-MNIST with a wide
# MLP (784-4096-4096-1250-10: 25.1M parameters, 100 MB of gradient) for the
# same wall-time budget in each mode:
#   ddp   synchronous dense SGD (DDP, gloo allreduce; train_fashion_mnist.py)
#   asgd  gradex's parameter server, density 1 (train_dgs_fashion_mnist.py)
#   dgs   gradex's parameter server, DGS at --density (default 0.01)
# Rank 0 hosts the coordinator and the server shard in its process, so its link
# carries every push and pull. Batch 8 per worker: on this CPU a batch-64 step
# of this model computes for about 4 s on one core (8 s with four workers on
# two cores), which would hide any network; at batch 8 a step's compute is
# closer to what a GPU spends on it, as in the seed's figure. Every rank logs
# its loss per step against its training wall time; plot_loss_wall.py draws
# OUT/loss_wall.png and writes OUT/summary.md. A measurement: nothing passes or fails on a time. Root.
#
# Usage: bench/dgs/loss_wall.sh [--modes ddp,asgd,dgs] [--budget-s 240]
#          [--rate 1gbit] [--hidden 4096,4096,1250] [--batch 8] [--density 0.01]
#          [--lr-ddp 0.05] [--lr-ps 0.0125] [--build-dir DIR] [--out DIR]
#          (default OUT: bench/results/dgs/loss_wall)
# Traffic: only 10.95.0.0/24 on interfaces created here (namespaces gxlw0..3
# and gxlwbr); the root namespace is not touched.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
modes=ddp,asgd,dgs budget=240 rate=1gbit hidden=4096,4096,1250 batch=8 density=0.01
lr_ddp=0.05 lr_ps=0.0125
build=$root/build
out=$root/bench/results/dgs/loss_wall
PREFIX=gxlw NET=10.95.0 RANKS=4
py=/usr/bin/python3
source "$root/bench/lib/common.sh"
gx_args loss_wall 2,23 'unknown argument %s (see --help)' \
  '--modes=modes --budget-s=budget --rate=rate --hidden=hidden --batch=batch --density=density
   --lr-ddp=lr_ddp --lr-ps=lr_ps --build-dir=build:path --out=out:path' "$@"
[[ $budget =~ ^[1-9][0-9]*$ ]] || die "--budget-s must be a positive integer, got '$budget'"
gx_positive_ints batch
[[ $hidden =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || die "bad --hidden '$hidden' (e.g. 4096,4096,1250)"
gx_check_rate "$rate"
for v in density lr_ddp lr_ps; do
  [[ ${!v} =~ ^[0-9]*\.?[0-9]+$ ]] || die "--${v//_/-} must be a positive number, got '${!v}'"
done
gx_modes "$modes" '^(ddp|asgd|dgs)$'
gx_need_root
gx_need_gradex "$build" dgs.py
"$py" -c 'import torch, matplotlib' 2>/dev/null || die "$py needs torch and matplotlib"

gx_netns_bench "$PREFIX" "$RANKS" "$rate" "$NET" "$out" loss_wall
echo "$RANKS workers, tc tbf $rate both ways per worker, rank 0 hosting the server shard; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); torch $("$py" -c 'import torch; print(torch.__version__)'); $(date -u +%FT%TZ); source $(gx_source_version "$root"); MLP hidden $hidden, batch $batch per worker, budget ${budget} s of training per mode; test accuracy on the first 1000 test images; lr ddp $lr_ddp, asgd/dgs $lr_ps; density $density" >"$out/raw/meta.txt"

port=29800
run_mode() {  # run_mode MODE
  local mode=$1 cmd
  port=$((port + 1))
  case $mode in
    ddp) cmd=("$root/examples/train_fashion_mnist.py" --algorithm dense --lr "$lr_ddp") ;;
    asgd) cmd=("$root/examples/train_dgs_fashion_mnist.py" --backend gradex --mode asgd
               --lr "$lr_ps" --timeout-s 300) ;;
    dgs) cmd=("$root/examples/train_dgs_fashion_mnist.py" --backend gradex --mode dgs
              --density "$density" --lr "$lr_ps" --timeout-s 300) ;;
  esac
  gx_run_ranks "$PREFIX" "$NET" "$RANKS" "$port" "$out/raw/$mode" PYTHONPATH="$build/python" \
    timeout $((budget * 3 + 600)) "$py" "${cmd[@]}" --hidden "$hidden" \
    --batch-size "$batch" --epochs 50 --time-budget-s "$budget" \
    --test-subset 1000 --step-log "$out/raw/$mode.rank{rank}.steps" --csv "$out/raw/$mode.csv"
}

t_start=$SECONDS
for m in "${MODES[@]}"; do
  say "$m: $RANKS workers, ${budget} s of training each (load $(cut -d' ' -f1 /proc/loadavg))"
  if run_mode "$m"; then
    say "  done: $(grep -h 'test_acc' "$out/raw/$m.rank0.log" | tail -1)"
  else
    say "  $m failed; see $out/raw/$m.rank*.log"
  fi
done
teardown
"$py" "$here/plot_loss_wall.py" "$out" --title "Fashion-MNIST, 25.1M-parameter MLP, 4 workers behind $rate links"
say "all done in $((SECONDS - t_start)) s: $out/summary.md, $out/loss_wall.png"
