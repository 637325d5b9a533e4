#!/usr/bin/env bash
# scripts/gpu-check's skip classifier on made-up gtest output: on a machine of
# one GPU a "needs 2 GPUs, found 1" skip is honest, while a "no device" skip,
# a skip without a gradex-skip reason and a "needs 2, found 0" are faults (the
# check did not run there); on a machine without a GPU every skip is honest.
# Also the real prefixes: the GPU tests' skip messages as tests/cuda_device.h
# writes them, so that the script and the tests cannot drift apart.
set -uo pipefail
root=$1
check=$root/scripts/gpu-check
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect WHAT GOT WANT
  if [[ $2 == "$3" ]]; then
    echo "ok   $1"
  else
    echo "FAIL $1"
    echo "  got:  $2" | sed '2,$s/^/        /'
    echo "  want: $3" | sed '2,$s/^/        /'
    fail=1
  fi
}
cat >"$tmp/mixed.log" <<'LOG'
Running main() from ./googletest/src/gtest_main.cc
[==========] Running 4 tests from 2 test suites.
[ RUN      ] CudaQueue.MatchesHost
/work/main/tests/device/cuda_queue_test.cc:120: Skipped
gradex-skip: no device: no CUDA driver is installed

[  SKIPPED ] CudaQueue.MatchesHost (0 ms)
[ RUN      ] CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor
/work/main/tests/device/cuda_queue_test.cc:546: Skipped
gradex-skip: needs 2 GPUs, found 1

[  SKIPPED ] CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor (1 ms)
[ RUN      ] CudaQueue.Passes
[       OK ] CudaQueue.Passes (3 ms)
[ RUN      ] Other.Unprefixed
/work/main/tests/x.cc:9: Skipped
built without CUDA

[  SKIPPED ] Other.Unprefixed (0 ms)
[ RUN      ] Other.NoneFound
/work/main/tests/x.cc:19: Skipped
gradex-skip: needs 2 GPUs, found 0

[  SKIPPED ] Other.NoneFound (0 ms)
[==========] 5 tests from 2 test suites ran. (4 ms total)
[  PASSED  ] 1 test.
[  SKIPPED ] 4 tests, listed below:
[  SKIPPED ] CudaQueue.MatchesHost
[  SKIPPED ] CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor
[  SKIPPED ] Other.Unprefixed
[  SKIPPED ] Other.NoneFound
LOG
got=$("$check" --classify-skips --gpus 1 "$tmp/mixed.log")
rc=$?
expect "one GPU: exit 1 (faults)" "$rc" 1
expect "one GPU: verdicts" "$got" "fault CudaQueue.MatchesHost: gradex-skip: no device: no CUDA driver is installed
honest CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor: gradex-skip: needs 2 GPUs, found 1
fault Other.Unprefixed: (a skip without a gradex-skip reason)
fault Other.NoneFound: gradex-skip: needs 2 GPUs, found 0"
got=$("$check" --classify-skips --gpus 0 "$tmp/mixed.log")
rc=$?
expect "no GPU: exit 0" "$rc" 0
expect "no GPU: every skip honest" "$(grep -c '^honest ' <<<"$got")" 4
# Eight GPUs: needs 2, found 1 is still honest by the test's own count (the
# script trusts the test's "found"; CUDA_VISIBLE_DEVICES may hide GPUs).
cat >"$tmp/honest.log" <<'LOG'
[ RUN      ] CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor
/work/main/tests/device/cuda_queue_test.cc:546: Skipped
gradex-skip: needs 2 GPUs, found 1

[  SKIPPED ] CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor (1 ms)
LOG
got=$("$check" --classify-skips --gpus 8 "$tmp/honest.log")
rc=$?
expect "only an honest skip: exit 0" "$rc" 0
expect "only an honest skip: its verdict" "$got" \
  "honest CudaQueue.CallersStreamOfAnotherDeviceIsWaitedFor: gradex-skip: needs 2 GPUs, found 1"
# No skip at all: nothing printed, exit 0.
grep -v 'SKIPPED\|Skipped\|gradex-skip' "$tmp/mixed.log" >"$tmp/none.log"
got=$("$check" --classify-skips --gpus 1 "$tmp/none.log")
rc=$?
expect "no skips: exit 0, nothing printed" "$rc:$got" "0:"
# The prefixes the tests write are the ones the script reads.
hdr=$root/tests/cuda_device.h
expect "cuda_device.h writes 'gradex-skip: no device: '" \
  "$(grep -c 'kSkipNoDevice\[\] = "gradex-skip: no device: "' "$hdr")" 1
expect "cuda_device.h writes 'gradex-skip: needs N GPUs, found M'" \
  "$(grep -c '"gradex-skip: needs "' "$hdr")" 1
exit $fail
