#!/usr/bin/env bash
# Runs gradex-client-pipeline from several builds in turn, round after round
# (the order rotated each round), so that builds meet the same machine; prints
# each run's median step time (pipeline on and off) per build and config, then
# the median over the rounds. It measures and prints; it judges nothing.
#
#   bench/client_pipeline/compare.sh ROUNDS OUTDIR NAME=BINARY [NAME=BINARY ...]
#
# Configs: 4 ranks x 8 x 262144 and 2 ranks x 8 x 1048576 floats (spardl,
# density 0.01, UCX on loopback), --steps 30 --warmup 3.
set -euo pipefail
if [[ $# -lt 3 || $1 == --help ]]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  [[ ${1:-} == --help ]] && exit 0 || exit 2
fi
rounds=$1 out=$2
shift 2
names=() bins=()
for a in "$@"; do
  names+=("${a%%=*}")
  bins+=("${a#*=}")
  [[ -x ${a#*=} ]] || { echo "compare.sh: ${a#*=} is not an executable" >&2; exit 2; }
done
mkdir -p "$out"
configs=("--ranks 4 --buckets 8 --elements 262144" "--ranks 2 --buckets 8 --elements 1048576")
tsv=$out/runs.tsv
echo -e "round\tconfig\tbuild\ton_ms\toff_ms" >"$tsv"
export UCX_WARN_UNUSED_ENV_VARS=n
for ((r = 0; r < rounds; r++)); do
  for ((c = 0; c < ${#configs[@]}; c++)); do
    n=${#names[@]}
    for ((k = 0; k < n; k++)); do
      i=$(((k + r) % n))
      log=$out/r${r}_c${c}_${names[$i]}.txt
      # shellcheck disable=SC2086
      timeout 300 "${bins[$i]}" ${configs[$c]} --steps 30 --warmup 3 >"$log" 2>&1 || {
        echo "round $r config $c ${names[$i]}: failed (see $log)" >&2
        continue
      }
      on=$(awk '$1 == "on" {print $2}' "$log")
      off=$(awk '$1 == "off" {print $2}' "$log")
      echo -e "$r\t$c\t${names[$i]}\t$on\t$off" >>"$tsv"
      echo "round $r config $c ${names[$i]}: on $on ms, off $off ms"
    done
  done
done
python3 - "$tsv" "${configs[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
configs = sys.argv[2:]
builds = list(dict.fromkeys(r["build"] for r in rows))
for c, desc in enumerate(configs):
    print(f"\n{desc}:")
    for mode in ("on_ms", "off_ms"):
        cells = []
        for b in builds:
            v = [float(r[mode]) for r in rows if r["build"] == b and int(r["config"]) == c and r[mode]]
            if v:
                cells.append(f"{b} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}, n={len(v)})")
        print(f"  {mode[:-3]:>3}: " + " | ".join(cells))
PY
