#!/usr/bin/env bash
# mpi-allreduce-bench with 2 ranks over TCP on loopback, small N: it must exit
# 0, print gradex-bench's JSON fields, agree with the exact sum (integer
# gradients: error exactly 0) on both ranks, and reject a bad flag.
set -euo pipefail
mpirun=$1
bin=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
# Root in CI containers; one core is enough for two ranks. TCP on lo only, so
# the test needs no other interface.
mpi=("$mpirun" --allow-run-as-root --oversubscribe -np 2 --mca pml ob1 --mca btl "tcp,self"
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
out=$(timeout 50 "${mpi[@]}" "$bin" --elements 100003 --iters 3 --warmup 1 --integer --quiet) ||
  fail "mpirun exited $?: $out"
echo "$out"
line=$(grep '^{"algo":"mpi-allreduce"' <<<"$out") || fail "no JSON line"
for key in ranks teams elements density iters median_s p90_s sent_bytes_per_rank \
  recv_bytes_per_rank result_nnz consistent conservation_max_abs_err algbw_gbps busbw_gbps \
  selection_s communication_s reduction_s; do
  grep -q "\"$key\":" <<<"$line" || fail "JSON lacks $key"
done
grep -q '"ranks":2,' <<<"$line" || fail "ranks is not 2"
grep -q '"elements":100003,' <<<"$line" || fail "elements is not 100003"
grep -q '"consistent":true' <<<"$line" || fail "ranks disagree"
grep -q '"conservation_max_abs_err":0,' <<<"$line" || fail "sum is not exact on integers"
nnz=$(sed 's/.*"result_nnz":\([0-9]*\).*/\1/' <<<"$line")
# 5% zeros per rank, integers in [-64, 64]: the sum of two is mostly non-zero.
[[ $nnz -gt 90000 && $nnz -le 100003 ]] || fail "result_nnz $nnz implausible"
rc=0
err=$(timeout 30 "${mpi[@]}" "$bin" --iters 0 2>&1) || rc=$?
[[ $rc -ne 0 ]] || fail "--iters 0 accepted"
grep -q "bad value" <<<"$err" || fail "--iters 0: message '$err'"
echo "ok"
