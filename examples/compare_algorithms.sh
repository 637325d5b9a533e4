#!/usr/bin/env bash
# Trains the Fashion-MNIST MLP with dense DDP and with gradex's algorithms at
# one density (the same seeds every run), then writes the CSV, the PNG and a
# table of each epoch's test-accuracy gap to dense. An algorithm that cannot
# run (not in this build's catalog, or failing) is reported and skipped.
#
#   examples/compare_algorithms.sh [--nproc 4] [--epochs 3] [--density 0.01]
#       [--start-iter N] [--out DIR] [--algorithms "dense spardl ..."] [--keep]
#       [-- extra training flags]
# --keep appends to DIR/fashion_mnist.csv instead of starting it afresh. The
# SAG variants (spardl-rsag, spardl-bsag) run with 2 teams when --nproc is even
# (with 1 team they are spardl).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nproc=4 epochs=3 density=0.01 start_iter="" out="$root/examples/results" keep=0
algorithms="dense spardl spardl-bsag oktopk topka gaussiank covap auto"
source "$root/bench/lib/common.sh"
gx_args compare_algorithms 2,12 "unknown flag '%s' (--help)" \
  '--nproc=nproc --epochs=epochs --density=density --start-iter=start_iter --out=out
   --algorithms=algorithms --keep=keep=1 --' "$@"
set -- "${GX_REST[@]}"
py=/usr/bin/python3
export PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out"
csv="$out/fashion_mnist.csv"
[[ $keep == 1 ]] || : > "$csv"
failed=()
for algo in $algorithms; do
  echo "=== $algo (ranks $nproc, epochs $epochs, density $density, start_iter ${start_iter:-"gradex's"})"
  log="$out/$algo.log"
  teams=0
  [[ "$algo" == spardl-?sag && $((nproc % 2)) == 0 ]] && teams=2
  if "$root/scripts/launch" -n "$nproc" --timeout-s $((epochs * 1200 + 300)) -- \
      "$py" "$root/examples/train_fashion_mnist.py" --algorithm "$algo" --density "$density" \
      ${start_iter:+--start-iter "$start_iter"} --teams "$teams" --epochs "$epochs" --csv "$csv" --check-identical "$@" \
      >"$log" 2>&1; then
    grep -E "^\[rank 0\] (\[$algo\]|parameters)" "$log"
  else
    echo "compare_algorithms: $algo could not run (exit $?); last lines of $log:"
    tail -n 4 "$log" | sed 's/^/    /'
    failed+=("$algo")
  fi
done
"$py" "$root/examples/plot_accuracy.py" "$csv" "$out/fashion_mnist.png" \
  --title "Fashion-MNIST MLP, $nproc ranks on CPU (gloo), density $density"
"$py" - "$csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
dense = {r["epoch"]: float(r["test_acc"]) for r in rows if r["algorithm"] == "dense"}
algos = list(dict.fromkeys(r["algorithm"] for r in rows))
epochs = sorted({int(r["epoch"]) for r in rows})
print("\n| algorithm | " + " | ".join(f"epoch {e}" for e in epochs) + " | wall s (last) |")
print("|---" * (len(epochs) + 2) + "|")
for a in algos:
    got = {int(r["epoch"]): r for r in rows if r["algorithm"] == a}
    cells = []
    for e in epochs:
        r = got.get(e)
        if r is None:
            cells.append("-")
            continue
        acc = 100 * float(r["test_acc"])
        gap = "" if a == "dense" or str(e) not in dense else f" ({acc - 100 * dense[str(e)]:+.2f})"
        cells.append(f"{acc:.2f}{gap}")
    last = got[max(got)]["wall_s"] if got else "-"
    print(f"| {a} | " + " | ".join(cells) + f" | {last} |")
print("\n(test accuracy %, in parentheses the gap to dense at the same epoch)")
PY
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "compare_algorithms: could not run: ${failed[*]}"
fi
