#!/usr/bin/env bash
# Fashion-MNIST, 4 workers, the same epochs: synchronous dense DDP
# (train_fashion_mnist.py --algorithm dense), ASGD (density 1) and DGS
# (density 0.01) through gradex's parameter server (train_dgs_fashion_mnist.py
# --backend gradex, rank 0 hosting the coordinator and the server shard).
# Writes OUT/dgs.csv, OUT/<run>.log and OUT/dgs.png (loss vs wall time,
# accuracy vs epoch). With --backend reference, ASGD and DGS run in one
# process through gradex.dgs_reference (sync: its synchronous momentum SGD).
#
#   examples/compare_dgs.sh [--epochs 3] [--workers 4] [--lr 0.05] [--density 0.01]
#       [--backend gradex|reference] [--runs "dense asgd dgs"] [--out DIR]
#       [--extra "ARGS for every run"]      (default OUT: examples/results/dgs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
epochs=3 workers=4 lr=0.05 density=0.01 backend=gradex runs="dense asgd dgs" extra=""
out=$root/examples/results/dgs
source "$root/bench/lib/common.sh"
gx_args compare_dgs 2,12 'unknown argument %s (--help)' \
  '--epochs=epochs --workers=workers --lr=lr --density=density --backend=backend --runs=runs
   --out=out:path --extra=extra' "$@"
[[ $backend == gradex || $backend == reference ]] || die "bad --backend"
export PYTHONPATH=${PYTHONPATH:-$root/build/python} OMP_NUM_THREADS=1
# UCX shared memory between the rank processes fails on some hosts (shmat:
# EINVAL here); TCP over loopback works everywhere.
export UCX_TLS=${UCX_TLS:-tcp,self} UCX_WARN_UNUSED_ENV_VARS=n
py=/usr/bin/python3
mkdir -p "$out"
csv=$out/dgs-$backend.csv
rm -f "$csv"
read -r -a EXTRA <<<"$extra"
for run in $runs; do
  log=$out/$backend-$run.log
  echo "[compare_dgs] $run ($backend, $workers workers, $epochs epochs): $log" >&2
  rc=0
  case $backend/$run in
    gradex/dense)
      nice -n 10 "$root/scripts/launch" -n "$workers" --timeout-s 7200 -- "$py" \
        "$here/train_fashion_mnist.py" --algorithm dense --epochs "$epochs" --lr "$lr" \
        --csv "$csv.dense" "${EXTRA[@]}" >"$log" 2>&1 || rc=$?
      # Its rows have 'algorithm' where ours have 'mode'; plot_dgs reads both.
      ;;
    gradex/asgd|gradex/dgs)
      nice -n 10 "$root/scripts/launch" -n "$workers" --timeout-s 7200 -- "$py" \
        "$here/train_dgs_fashion_mnist.py" --backend gradex --mode "$run" --epochs "$epochs" \
        --lr "$lr" --density "$density" --csv "$csv" "${EXTRA[@]}" >"$log" 2>&1 || rc=$?
      ;;
    reference/dense|reference/sync|reference/asgd|reference/dgs)
      mode=$run
      [[ $run == dense ]] && mode=sync
      nice -n 10 "$py" "$here/train_dgs_fashion_mnist.py" --backend reference --mode "$mode" \
        --workers "$workers" --epochs "$epochs" --lr "$lr" --density "$density" --csv "$csv" \
        "${EXTRA[@]}" >"$log" 2>&1 || rc=$?
      ;;
    *) echo "compare_dgs: unknown run '$run'" >&2; rc=2 ;;
  esac
  [[ $rc == 0 ]] || echo "[compare_dgs] $run failed (exit $rc); see $log" >&2
done
csvs=()
for f in "$csv" "$csv.dense"; do [[ -s $f ]] && csvs+=("$f"); done
if [[ ${#csvs[@]} -gt 0 ]]; then
  "$py" "$here/plot_dgs.py" "$out/dgs-$backend.png" "${csvs[@]}" \
    --title "Fashion-MNIST, $workers workers ($backend): sync dense vs ASGD vs DGS $density"
fi
