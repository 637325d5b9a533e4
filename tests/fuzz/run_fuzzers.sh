#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in their own build dir and runs
# each for a bounded time over its committed seed corpus (new inputs go to a
# scratch dir, never into the repository). Exit 77 (ctest: skipped) when
# clang or libFuzzer is missing.
# Usage: run_fuzzers.sh SOURCE_ROOT BUILD_DIR [SECONDS_EACH]
set -euo pipefail
src=$1
build=$2
secs=${3:-10}

cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)
if [[ -z $cxx || -z $cc ]]; then
  echo "SKIPPED: clang++ not found; the libFuzzer targets need clang (apt-get install clang)"
  exit 77
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
  "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "SKIPPED: $cxx cannot link -fsanitize=fuzzer (libclang_rt.fuzzer missing)"
  exit 77
fi

log=$(mktemp)
scratch=$(mktemp -d)
trap 'rm -rf "$log" "$scratch"' EXIT
if ! { cmake -S "$src/tests/fuzz/standalone" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_COMPILER="$cc" && cmake --build "$build" -j2 --target frame_fuzzer job_config_fuzzer; } \
  >"$log" 2>&1; then
  cat "$log"
  echo "FAILED: building the fuzzers"
  exit 1
fi

status=0
for target in frame job_config; do
  mkdir -p "$scratch/$target" "$scratch/artifacts-$target"
  echo "== ${target}_fuzzer for ${secs} s"
  if ! "$build/${target}_fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$scratch/artifacts-$target/" \
    "$scratch/$target" "$src/tests/fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log"
    for a in "$scratch/artifacts-$target"/*; do
      [[ -e $a ]] && echo "crashing input (base64): $(base64 -w0 "$a")"
    done
    echo "FAILED: ${target}_fuzzer"
    status=1
  else
    grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)' "$log" || true
  fi
done
exit $status
