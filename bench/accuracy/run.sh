#!/usr/bin/env bash
# Test accuracy of dense DDP and of gradex's algorithms with the optimizer
# built as usual and handed over (GradexState(optimizer=opt)), per optimizer:
# Fashion-MNIST MLP (examples/train_fashion_mnist.py), the same seeds every
# run. Writes DIR/accuracy.csv, DIR/*.log, DIR/table.md and the plot
# (bench/accuracy/report.py). Measures and prints; passes or fails nothing.
#
#   bench/accuracy/run.sh [--nproc 4] [--nnodes 0] [--epochs 2] [--density 0.01]
#       [--algorithms "dense spardl oktopk topka"] [--optimizers "sgd adam"]
#       [--out DIR] [--png FILE] [--keep] [-- extra training flags]
# Default DIR: bench/results/accuracy; default FILE: docs/accuracy.png.
# --nnodes M: the ranks as M emulated nodes (scripts/launch --nnodes), which
# the hierarchical exchange runs on.
# --keep appends to DIR/accuracy.csv (runs measured in parts).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
nproc=4 nnodes=0 epochs=2 density=0.01 algorithms="dense spardl oktopk topka" optimizers="sgd adam" keep=0
out="$root/bench/results/accuracy" png="$root/docs/accuracy.png"
source "$root/bench/lib/common.sh"
gx_args accuracy 2,14 "unknown flag '%s' (--help)" \
  '--nproc=nproc --nnodes=nnodes --epochs=epochs --density=density --algorithms=algorithms
   --optimizers=optimizers --out=out --png=png --keep=keep=1 --' "$@"
set -- "${GX_REST[@]}"
py=/usr/bin/python3
export PYTHONPATH="${GRADEX_PYTHONPATH:-$root/build/python}${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1
mkdir -p "$out"
csv="$out/accuracy.csv"
[[ $keep == 1 ]] || : > "$csv"
for opt in $optimizers; do
  for algo in $algorithms; do
    log="$out/$opt-$algo.log"
    echo "=== $opt, $algo (ranks $nproc, epochs $epochs, density $density)"
    t0=$(date +%s)
    if "$root/scripts/launch" -n "$nproc" --nnodes "$nnodes" --timeout-s $((epochs * 1200 + 300)) -- \
        "$py" "$root/examples/train_fashion_mnist.py" --algorithm "$algo" --optimizer "$opt" \
        --hand-over --density "$density" --epochs "$epochs" --csv "$csv" --check-identical "$@" \
        >"$log" 2>&1; then
      grep -E "^\[rank 0\] (\[$algo\]|parameters|gradex:)|UserWarning: gradex" "$log" | head -n 20
    else
      echo "accuracy: $opt $algo failed (exit $?); last lines of $log:"
      tail -n 4 "$log" | sed 's/^/    /'
    fi
    echo "    ($(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
done
"$py" "$root/bench/accuracy/report.py" "$csv" --png "$png" --table "$out/table.md"
