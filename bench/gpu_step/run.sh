#!/usr/bin/env bash
# GPU training step time: 4 ranks share one GPU (torchrun, gloo for DDP's own
# traffic, CUDA tensors) and train the 25.2M-parameter MLP of
# bench/train_step/model.py (its rank script, train_step.py --device cuda):
# DDP's gloo allreduce against gradex's comm hook with several algorithms and
# `auto`, on unlimited loopback and on loopback limited by tc tbf (one link
# shared by all ranks). Prints and writes (OUT/summary.md, OUT/summary.json,
# bench/gpu_step/report.py) the median step times, their ratios to DDP in the
# same round, the PCIe bytes per step (stats()) and the GRADEX_TIMELINE phase
# split (selection / communication / reduction per step).
#
# Usage: bench/gpu_step/run.sh [--device cuda|cpu]
#          [--modes ddp,gradex:spardl,gradex:oktopk,gradex:topka,gradex:auto]
#          [--rates unlimited,10gbit,1gbit] [--no-tc] [--rounds 1] [--steps 8]
#          [--warmup 3] [--batch 64] [--width 4096] [--density 0.01] [--ranks 4]
#          [--ucx-tls tcp,self] [--run-timeout 300] [--python PY]
#          [--build-dir DIR] [--out DIR]   (default bench/results/gpu_step)
# --device cpu (a smoke test on a machine without a GPU) defaults to
# --width 256 --batch 8 --steps 3 --warmup 2 --rates unlimited.
# Rates other than `unlimited` run `tc qdisc replace dev lo root tbf rate R
# burst 8mb latency 200ms` (root) and remove it at exit; --no-tc skips them.
# gradex's UCX runs with UCX_TLS=tcp,self at every rate, so that its traffic
# crosses loopback as DDP's gloo does. gradex is imported from .gpu/ when a
# bundle is there (scripts/gpu-bundle; its env.sh is sourced), else from
# the build's python/ directory. `auto` runs with gradex's default dense
# probe period; the other modes with none (a short run never reaches one).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rank_script=$root/bench/train_step/train_step.py
device=cuda modes=ddp,gradex:spardl,gradex:oktopk,gradex:topka,gradex:auto
rates='' rounds=1 steps='' warmup='' batch='' width='' density=0.01 ranks=4 use_tc=1
ucx_tls=tcp,self run_timeout=300 py='' build=$root/build out=$root/bench/results/gpu_step
say() { echo "[gpu_step $(date -u +%T)] $*"; }
source "$root/bench/lib/common.sh"
gx_args gpu_step 2,27 'unknown argument %s (see --help)' \
  '--device=device --modes=modes --rates=rates --no-tc=use_tc=0 --rounds=rounds --steps=steps
   --warmup=warmup --batch=batch --width=width --density=density --ranks=ranks
   --ucx-tls=ucx_tls --run-timeout=run_timeout --python=py --build-dir=build:path
   --out=out:path' "$@"
case $device in
  cuda)
    : "${rates:=unlimited,10gbit,1gbit}" "${steps:=8}" "${warmup:=3}" "${batch:=64}"
    : "${width:=4096}" ;;
  cpu) : "${rates:=unlimited}" "${steps:=3}" "${warmup:=2}" "${batch:=8}" "${width:=256}" ;;
  *) die "--device must be cuda or cpu, got '$device'" ;;
esac
gx_positive_ints rounds steps warmup batch width ranks run_timeout
gx_modes "$modes" '^(ddp|compute|gradex:[a-z0-9-]+)$' '(ddp, compute, gradex:ALGORITHM)'
IFS=, read -r -a RATES <<<"$rates"
limited=0
for r in "${RATES[@]}"; do
  [[ $r == unlimited || $r =~ ^[0-9.]+(gbit|mbit)$ ]] ||
    die "bad rate '$r' (unlimited, 10gbit, 500mbit)"
  [[ $r == unlimited ]] || limited=1
done
if [[ $limited == 1 && $use_tc == 0 ]]; then
  say "--no-tc: only the unlimited rate runs (asked: $rates)"
  RATES=(unlimited)
  limited=0
fi

cd "$root"
if [[ -z $py ]]; then  # the first Python with torch: the GPU machine's python3, Debian's here
  for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null; then
      py=$(command -v "$c")
      break
    fi
  done
  [[ -n $py ]] || die "no python3 with torch found (--python PY)"
fi
"$py" -c 'import torch' 2>/dev/null || die "$py has no torch"
# gradex: the GPU bundle's package (.gpu/, built for the GPU machine's CPython 3.12) when this
# Python can load it, else the build's.
gradex_from=
# shellcheck disable=SC1091
if [[ -f .gpu/env.sh && -d .gpu/py/gradex ]] &&
  (source .gpu/env.sh && "$py" -c 'import gradex.torch') 2>/dev/null; then
  source .gpu/env.sh  # PYTHONPATH, UCX_MODULE_DIR, PATH (tc)
  gradex_from=.gpu
elif [[ -f $build/python/gradex/__init__.py ]] &&
  PYTHONPATH=$build/python "$py" -c 'import gradex.torch' 2>/dev/null; then
  export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
  gradex_from=$build/python
elif [[ " ${MODES[*]} " == *" gradex:"* ]]; then
  die "$py cannot import gradex.torch from .gpu/py (scripts/gpu-bundle, then copy .gpu/" \
    "beside the tree) nor from $build/python (scripts/build): $(PYTHONPATH=$build/python \
    "$py" -c 'import gradex.torch' 2>&1 | tail -1)"
fi
if [[ $device == cuda ]]; then
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    die "--device cuda, but torch sees no GPU ($py); --device cpu runs the smoke test"
fi

tc_set=0
if [[ $limited == 1 ]]; then
  [[ $(id -u) -eq 0 ]] || die "limited rates need root (tc on lo); run as root or pass --no-tc"
  command -v tc >/dev/null || die "no tc (iproute2; the GPU bundle carries it in .gpu/bin)"
  existing=$(tc qdisc show dev lo | grep -v 'noqueue' || true)
  [[ -z $existing ]] ||
    die "lo already has a qdisc ($existing); remove it first (tc qdisc del dev lo root)"
fi
child=  # the running job's `timeout`, which passes a signal on to torchrun and its ranks
cleanup() {
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  if [[ $tc_set == 1 ]]; then tc qdisc del dev lo root 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
set_rate() {
  if [[ $1 == unlimited ]]; then
    if [[ $tc_set == 1 ]]; then tc qdisc del dev lo root; tc_set=0; fi
  else
    tc_set=1
    tc qdisc replace dev lo root tbf rate "$1" burst 8mb latency 200ms
  fi
}

raw=$out/raw
rm -rf "$raw"
mkdir -p "$raw"
source "$root/bench/machine_load.sh"
gpu="none" driver="-" cuda_v="-"
if command -v nvidia-smi >/dev/null; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  cuda_v=$(nvidia-smi | grep -o 'CUDA Version: [0-9.]*' | head -1 | cut -d' ' -f3)
fi
env GXMETA_DEVICE="$device" GXMETA_GPU="$gpu" GXMETA_DRIVER="$driver" GXMETA_CUDA="$cuda_v" \
  GXMETA_RANKS="$ranks" GXMETA_STEPS="$steps" GXMETA_WARMUP="$warmup" GXMETA_BATCH="$batch" \
  GXMETA_WIDTH="$width" GXMETA_DENSITY="$density" GXMETA_ROUNDS="$rounds" \
  GXMETA_RATES="${RATES[*]}" GXMETA_MODES="${MODES[*]}" GXMETA_UCX_TLS="$ucx_tls" \
  GXMETA_GRADEX_FROM="$gradex_from" GXMETA_DATE="$(date -u +%FT%TZ)" \
  GXMETA_SOURCE="$(gx_source_version "$root")" \
  "$py" -c 'import json, os, sys, torch
m = {k[7:].lower(): v for k, v in os.environ.items() if k.startswith("GXMETA_")}
m.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cores=os.cpu_count())
json.dump(m, open(sys.argv[1], "w"), indent=1, sort_keys=True)' "$raw/meta.json"
say "$device, $ranks ranks on one device; $gpu (driver $driver, CUDA $cuda_v);" \
  "torch $("$py" -c 'import torch; print(torch.__version__)'); gradex from" \
  "${gradex_from:-nowhere (no gradex mode)}; rates ${RATES[*]}; modes ${MODES[*]}"

port=$((29500 + RANDOM % 1000))
failed=0
run_mode() {  # run_mode MODE TAG: one torchrun job, $ranks ranks
  local mode=$1 tag=$2 probe=0
  if [[ $mode == gradex:auto ]]; then probe=default; fi
  port=$((port + 1))
  # --no_python and --redirects/--tee: Debian's torch 1.13 under Python 3.11 needs them; torch
  # 2.x takes them as well.
  env GRADEX_TIMELINE="$raw/$tag.timeline.json" UCX_TLS="$ucx_tls" UCX_WARN_UNUSED_ENV_VARS=n \
    GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" \
    OMP_NUM_THREADS=1 timeout "$run_timeout" "$py" -m torch.distributed.run --no_python \
    --redirects 1 --tee 1 --log_dir "$raw/torchrun-$tag" --nnodes 1 --nproc_per_node "$ranks" \
    --master_addr 127.0.0.1 --master_port "$port" \
    "$py" "$rank_script" --mode "$mode" --device "$device" --width "$width" --steps "$steps" \
    --warmup "$warmup" --batch "$batch" --density "$density" --dense-probe-period "$probe" \
    --timeout-s 120 --out "$raw" --tag "$tag" >"$raw/$tag.log" 2>&1 &
  child=$!
  # In the background, so that a signal's trap runs now, not when the job ends.
  local rc=0
  wait "$child" || rc=$?
  child=
  return "$rc"
}

t_start=$SECONDS
for rate in "${RATES[@]}"; do
  set_rate "$rate"
  for ((rnd = 1; rnd <= rounds; rnd++)); do
    for m in "${MODES[@]}"; do
      tag=$rate-${m/:/-}-r$rnd
      machine_load >"$raw/$tag.load"
      t0=$SECONDS
      if run_mode "$m" "$tag"; then
        slowest=$(grep -ho 'median step [0-9]* ms' "$raw/$tag.log" | sort -t' ' -k3 -n | tail -1)
        say "$rate round $rnd/$rounds $m: $((SECONDS - t0)) s, $slowest (slowest rank's)"
      else
        failed=$((failed + 1))
        say "$rate round $rnd/$rounds $m: FAILED after $((SECONDS - t0)) s; see $raw/$tag.log"
        tail -5 "$raw/$tag.log" | sed 's/^/    /'
      fi
    done
  done
done
set_rate unlimited
"$py" "$here/report.py" "$out"
say "done in $((SECONDS - t_start)) s: $out/summary.md, $out/summary.json ($failed runs failed)"
[[ $failed == 0 ]]
