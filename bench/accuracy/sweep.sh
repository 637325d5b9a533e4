#!/usr/bin/env bash
# The accuracy sweep: gradex's algorithms next to dense DDP and PyTorch's
# PowerSGD hook over models no single setting was tuned on. For each model
# and batch size (per rank) and seed, 4 ranks train 2 epochs of Fashion-MNIST
# with SGD (lr 0.05, momentum 0.9, handed over: GradexState(optimizer=opt))
# under each method; rank 0's CSV row per epoch gives the test accuracy and
# the bytes a rank sends per step. bench/accuracy/sweep_report.py makes the
# table (median gap to dense and to PowerSGD per model, and its range) and
# the plot. Measures and prints; passes or fails nothing. A benchmark: it
# takes hours on 2 cores (about 1 min a run), not part of scripts/test.
#
#   bench/accuracy/sweep.sh [--nproc 4] [--epochs 2] [--density 0.01]
#       [--models "mlp-256-128 mlp-512-256 cnn"] [--batches "64 32"]
#       [--seeds "1 2 3"] [--methods "dense powersgd default spardl oktopk topka"]
#       [--out DIR] [-- extra training flags]
# Default DIR: bench/results/accuracy/sweep (sweep.csv, one log per run).
# Methods: dense (DDP's allreduce), powersgd (torch's hook, rank 4, error
# feedback, warm start, from step 10; one DDP bucket: torch 1.13's hook
# deadlocks in gloo with two in flight), default (GradexState() with no
# algorithm or density named), or any gradex algorithm name, optionally
# with parameters as NAME:PARAM=V[,PARAM=V] (e.g. spardl:spardl_residual_home=1,
# its own row label).
# A run already in DIR/sweep.csv (same model, batch, seed, method, all
# epochs) is skipped: an interrupted sweep goes on where it stopped.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nproc=4 epochs=2 density=0.01 models="mlp-256-128 mlp-512-256 cnn" batches="64 32" seeds="1 2 3"
methods="dense powersgd default spardl oktopk topka"
out="$root/bench/results/accuracy/sweep"
source "$root/bench/lib/common.sh"
gx_args accuracy-sweep 2,21 "unknown flag '%s' (--help)" \
  '--nproc=nproc --epochs=epochs --density=density --models=models --batches=batches
   --seeds=seeds --methods=methods --out=out:path --' "$@"
set -- "${GX_REST[@]}"
py=/usr/bin/python3
export PYTHONPATH="${GRADEX_PYTHONPATH:-$root/build/python}${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
mkdir -p "$out"
csv="$out/sweep.csv"

# The training flags of a model name: mlp-A-B (hidden sizes) or cnn.
model_flags() {
  case $1 in
    cnn) echo "--model cnn" ;;
    mlp-*) local h=${1#mlp-}; echo "--model mlp --hidden ${h//-/,}" ;;
    *) echo "accuracy-sweep: unknown model '$1' (mlp-A-B... or cnn)" >&2; return 2 ;;
  esac
}
# Whether DIR/sweep.csv holds all epochs of this run.
have_run() {
  [[ -s $csv ]] || return 1
  "$py" - "$csv" "$@" "$epochs" <<'EOF'
import csv, sys
path, model, batch, seed, method, epochs = sys.argv[1:]
with open(path, newline="") as f:
    got = {int(r["epoch"]) for r in csv.DictReader(f)
           if (r["model"], r["batch"], r["seed"], r["algorithm"]) == (model, batch, seed, method)}
sys.exit(0 if got >= set(range(1, int(epochs) + 1)) else 1)
EOF
}

total=0
for seed in $seeds; do for model in $models; do for batch in $batches; do for m in $methods; do
  total=$((total + 1))
done; done; done; done
i=0 t_start=$(date +%s)
for seed in $seeds; do
  for model in $models; do
    flags=$(model_flags "$model") || exit 2
    for batch in $batches; do
      for m in $methods; do
        i=$((i + 1))
        tag="$model-b$batch-s$seed-$m"
        if have_run "$model" "$batch" "$seed" "$m"; then
          echo "[$i/$total] $tag: in $csv already, skipped"
          continue
        fi
        log="$out/$tag.log"
        algo=${m%%:*} extra=()
        if [[ $m == *:* ]]; then
          IFS=, read -ra kvs <<< "${m#*:}"
          for kv in "${kvs[@]}"; do extra+=(--param "$kv"); done
        fi
        t0=$(date +%s)
        # shellcheck disable=SC2086  # flags are words
        if "$root/scripts/launch" -n "$nproc" --timeout-s $((epochs * 1800 + 300)) -- \
            "$py" "$root/examples/train_fashion_mnist.py" --algorithm "$algo" --label "$m" "${extra[@]}" --hand-over \
            --density "$density" --epochs "$epochs" --batch-size "$batch" --seed "$seed" $flags \
            --csv "$csv" --check-identical "$@" >"$log" 2>&1; then
          result=$(grep -E "^\[rank 0\] \[$m\] epoch $epochs " "$log" | sed 's/.*test_acc //')
          same=$(grep -c "identical on all $nproc ranks: True" "$log")
          echo "[$i/$total] $tag: test accuracy ${result:-?}, identical $same ($(( $(date +%s) - t0 )) s, elapsed $(( ($(date +%s) - t_start) / 60 )) min)"
        else
          echo "[$i/$total] $tag: failed (exit $?); last lines of $log:"
          tail -n 4 "$log" | sed 's/^/    /'
        fi
      done
    done
  done
done
"$py" "$root/bench/accuracy/sweep_report.py" "$csv" --table "$out/table.md" --png "$out/sweep.png"
