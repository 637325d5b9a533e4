# shellcheck shell=bash
# What the benchmark and example drivers share (bench/dgs/run.sh,
# bench/dgs/loss_wall.sh, bench/train_step/run.sh, bench/gpu_step/run.sh,
# bench/cloud_net.sh, bench/accuracy/run.sh, examples/compare_*.sh): option
# parsing, the checks of their values, and the start of one job's ranks in
# their network namespaces. Sourced, never run.

# gx_args PROG HELP UNKNOWN SPECS ARG...
#   Parses the ARGs into the caller's variables as SPECS (words separated by
#   white space) say:
#     --flag=var        the next ARG goes into var
#     --flag=var:path   the same, made absolute (realpath -m)
#     --flag=var=VALUE  takes no ARG: var=VALUE
#     --                an ARG `--` ends the options; the ARGs after it go
#                       into the array GX_REST (empty without one)
#   -h or --help prints the lines HELP of $0 (a sed range: 2,23) without their
#   comment marks ("raw:2,14": as they stand) and exits 0. Any other ARG:
#   "PROG: " and the printf format UNKNOWN of it on stderr, exit 2. A flag
#   whose value is missing stops the script with the shell's unbound-variable
#   error (set -u). PROG is kept in GX_PROG for die and the checks below.
# shellcheck disable=SC2034  # GX_REST is read by the caller
gx_args() {
  GX_PROG=$1
  local help=$2 unknown=$3 specs=$4 spec target var val
  local -A take=()
  shift 4
  for spec in $specs; do
    take[${spec%%=*}]=${spec#*=}
  done
  GX_REST=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      -h|--help)
        if [[ $help == raw:* ]]; then
          sed -n "${help#raw:}p" "$0"
        else
          sed -n "${help}p" "$0" | sed 's/^# \{0,1\}//'
        fi
        exit 0 ;;
    esac
    target=
    [[ -n $1 ]] && target=${take[$1]-}
    if [[ -z $target ]]; then
      # shellcheck disable=SC2059  # UNKNOWN is the caller's format
      printf "%s: $unknown\n" "$GX_PROG" "$1" >&2
      exit 2
    fi
    var=${target%%[:=]*}
    case $target in
      --) shift; GX_REST=("$@"); return 0 ;;
      *=*) printf -v "$var" '%s' "${target#*=}"; shift ;;
      *:path) val=$(realpath -m "$2"); printf -v "$var" '%s' "$val"; shift 2 ;;
      *) printf -v "$var" '%s' "$2"; shift 2 ;;
    esac
  done
}

GX_BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)  # bench/

# die MSG...: "PROG: MSG" on stderr (PROG as gx_args got it), exit 2.
die() { echo "$GX_PROG: $*" >&2; exit 2; }

# gx_need_root: exits 1 unless root (the namespace benchmarks need it).
gx_need_root() {
  [[ $(id -u) -eq 0 ]] || { echo "$GX_PROG: needs root (network namespaces, tc)" >&2; exit 1; }
}

# gx_positive_ints VAR...: each VAR must hold a positive integer; its flag is
# --VAR with - for _.
gx_positive_ints() {
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-} must be a positive integer, got '${!v}'"
  done
}

# gx_check_rate RATE: a tc rate, e.g. 1gbit or 500mbit (--rate).
gx_check_rate() {
  [[ $1 =~ ^[0-9.]+(gbit|mbit)$ ]] || die "bad --rate '$1' (e.g. 1gbit, 500mbit)"
}

# gx_modes LIST REGEX [HINT]: LIST split at its commas into the array MODES;
# a mode REGEX does not match is refused ("bad mode 'M'", then HINT).
gx_modes() {
  local m
  IFS=, read -r -a MODES <<<"$1"
  for m in "${MODES[@]}"; do
    [[ $m =~ $2 ]] || die "bad mode '$m'${3:+ $3}"
  done
}

# gx_need_gradex BUILD FILE: BUILD's Python package must have FILE.
gx_need_gradex() {
  [[ -f $1/python/gradex/$2 ]] || die "$1/python/gradex not built (scripts/build)"
}

# gx_netns_bench PREFIX RANKS RATE NET OUT TAG: a namespace bench begun
# (bench/netns_lib.sh's gx_bench_begin: teardown at exit, say, OUT/raw
# emptied) and its RANKS namespaces up behind RATE links on NET.0/24.
gx_netns_bench() {
  # shellcheck source=bench/netns_lib.sh
  source "$GX_BENCH_DIR/netns_lib.sh"
  gx_bench_begin "$1" "$2" "$5" "$6"
  gx_netns_up "$1" "$2" "$3" "$4"
}

# gx_source_version DIR: `git describe` of the tree at DIR (dirty marked), or
# unknown.
gx_source_version() {
  git -C "$1" describe --always --dirty 2>/dev/null || echo unknown
}

# gx_run_ranks PREFIX NET RANKS PORT LOG [VAR=VALUE...] CMD...: one job, CMD
# in each of the RANKS namespaces (bench/netns_lib.sh's gx_rank_exec, torch's
# store on PORT), rank r's output in LOG.rank<r>.log; waits for all of them
# and returns the first failure. The ranks' processes are in the global array
# `pids` while they run (gx_bench_begin's INT/TERM trap stops them).
gx_run_ranks() {
  local prefix=$1 net=$2 ranks=$3 port=$4 log=$5 r status=0
  shift 5
  pids=()
  for ((r = 0; r < ranks; r++)); do
    gx_rank_exec "$prefix" "$net" "$ranks" "$r" "$port" "$@" >"$log.rank$r.log" 2>&1 &
    pids+=($!)
  done
  gx_wait_all "${pids[@]}" || status=$?
  pids=()
  return "$status"
}
