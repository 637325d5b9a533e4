#!/usr/bin/env bash
# bench/compare without a network: --dry-run prints the plan (namespaces, the
# gradex-bench and mpirun command lines pinned to the emulated links), bad
# options are refused, and compare_report.py turns a fixture of raw runs into
# the CSV and tables (phases parsed from gradex-bench's table, dense rows
# repeated per density, skipped/failed algorithms kept, the right winner).
set -euo pipefail
root=$1
build=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
py=/usr/bin/python3
[[ -x $py ]] || py=python3

out=$("$root/bench/compare" --dry-run --ranks 2,3 --bandwidths 1 --densities 0.01,0.05 \
  --build-dir "$build" --elements 1000 2>&1) || fail "dry run exited $?: $out"
echo "$out"
grep -q 'gx_netns_up gxc 3 1gbit 10.98.0 1' <<<"$out" || fail "no namespace setup for P=3"
grep -q 'UCX_NET_DEVICES=gxeth' <<<"$out" || fail "UCX not pinned to the emulated link"
grep -q "bench/in_netns\\\\ gxc%d" <<<"$out" || fail "ranks not wrapped in namespaces (with their GRADEX_DATA_IP)"
grep -q 'btl_tcp_if_include  10.98.0.0/24' <<<"$out" || fail "MPI not pinned to the subnet"
[[ $(grep -c 'mpirun' <<<"$out") -eq 2 ]] || fail "MPI should run once per (bandwidth, P)"
# Dense algorithms run at the first density only.
grep 'density  0.05' <<<"$out" | grep -q 'dense-ring' && fail "dense-ring rerun at density 0.05"
for bad in "--ranks 1" "--densities 2" "--bandwidths x" "--iters 0" "--bogus"; do
  rc=0
  # shellcheck disable=SC2086
  "$root/bench/compare" --dry-run $bad >/dev/null 2>&1 || rc=$?
  [[ $rc -eq 2 ]] || fail "'$bad' exited $rc, want 2"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/raw"
cat >"$tmp/raw/gradex-bw1-p4-d0.01.txt" <<'T'
[gradex-bench] dense-ring: done
gradex-bench: 4 ranks over ucx, N=1000, density 0.01, 3 timed calls after 1 warmup, seed 1
algorithm        teams  median ms     p90 ms    sent MB    recv MB  result nnz invariants  select /    comm /  reduce busbw GB/s
dense-ring           1    1783.30    1873.30     150.00     150.00    24999609 yes            0.0 /  1700.5 /    60.2      0.084
spardl               1     118.30     128.00       3.00       3.00      250000 yes           40.1 /    60.2 /    11.3      1.268
dense-rabenseifner     1    1500.00    1600.00     150.00     150.00    24999609 yes            0.0 /  1400.0 /    90.0      0.100
spardl-rsag          3  skipped: spardl-rsag needs a power-of-two team count, --teams is 3
topka                1  FAILED: rank 1: DEADLINE_EXCEEDED: topka call 0
T
cat >"$tmp/raw/gradex-bw1-p4-d0.01.jsonl" <<'T'
{"algo":"dense-ring","ranks":4,"teams":1,"elements":1000,"density":0.01,"iters":3,"median_s":1.7833,"p90_s":1.8733,"sent_bytes_per_rank":150000288,"recv_bytes_per_rank":150000288,"result_nnz":24999609,"consistent":true,"conservation_max_abs_err":0,"algbw_gbps":0.056,"busbw_gbps":0.084}
{"algo":"spardl","ranks":4,"teams":1,"elements":1000,"density":0.01,"iters":3,"median_s":0.1183,"p90_s":0.128,"sent_bytes_per_rank":3000288,"recv_bytes_per_rank":3000288,"result_nnz":250000,"consistent":true,"conservation_max_abs_err":0,"algbw_gbps":0.84,"busbw_gbps":1.268}
{"algo":"dense-rabenseifner","ranks":4,"teams":1,"elements":1000,"density":0.01,"iters":3,"median_s":1.5,"p90_s":1.6,"sent_bytes_per_rank":150000288,"recv_bytes_per_rank":150000288,"result_nnz":24999609,"consistent":true,"conservation_max_abs_err":0,"algbw_gbps":0.06,"busbw_gbps":0.1}
T
cat >"$tmp/raw/gradex-bw1-p4-d0.05.txt" <<'T'
algorithm        teams  median ms     p90 ms    sent MB    recv MB  result nnz invariants  select /    comm /  reduce busbw GB/s
spardl               1     300.00     310.00      15.00      15.00     1250000 yes           50.0 /   200.0 /    40.0      0.500
T
: >"$tmp/raw/gradex-bw1-p4-d0.05.jsonl"
echo '{"algo":"mpi-allreduce","ranks":4,"teams":1,"elements":1000,"density":0.01,"iters":3,"median_s":1.9,"p90_s":2.0,"sent_bytes_per_rank":160000000,"recv_bytes_per_rank":160000000,"result_nnz":24999609,"consistent":true,"conservation_max_abs_err":1e-06,"algbw_gbps":0.05,"busbw_gbps":0.08,"selection_s":0,"communication_s":1.85,"reduction_s":0,"bytes_from":"netdev"}' \
  >"$tmp/raw/mpi-bw1-p4.jsonl"
"$py" "$root/bench/compare_report.py" "$tmp" >"$tmp/stdout" || fail "report exited $?"
csv=$tmp/compare.csv
cat "$csv"
row() { grep "^1.0,4,$1,$2," "$csv" || fail "no CSV row for density $1 $2"; }
[[ $(row 0.01 spardl) == *",ok,118.3,128.0,40.1,60.2,11.3,3.0003,"* ]] || fail "spardl row: $(row 0.01 spardl)"
[[ $(row 0.01 dense-rabenseifner) == *",ok,1500.0,1600.0,0.0,1400.0,90.0,"* ]] ||
  fail "long name not parsed: $(row 0.01 dense-rabenseifner)"
[[ $(row 0.01 spardl-rsag) == *",skipped,"* ]] || fail "skip lost"
[[ $(row 0.01 topka) == *",failed,"*DEADLINE_EXCEEDED* ]] || fail "failure lost"
# Dense rows measured at 0.01 appear at 0.05 too, saying where they ran.
[[ $(row 0.05 dense-ring) == *",0.01,"* ]] || fail "dense-ring not repeated at 0.05"
[[ $(row 0.05 mpi-allreduce) == *",ok,1900.0,"* ]] || fail "mpi row: $(row 0.05 mpi-allreduce)"
[[ $(row 0.05 spardl) == *",ok,300.0,"* ]] || fail "0.05 spardl row"
grep -q '| 1 | 0.01 | 4 | spardl | 118 | 16.1x |' "$tmp/compare.md" || fail "winner line wrong"
grep -q '| 1 | 0.01 | spardl | \*\*118\*\* |' "$tmp/compare.md" || fail "fastest not bold"
if "$py" -c 'import matplotlib' 2>/dev/null; then
  [[ -s $tmp/compare.png ]] || fail "no PNG although matplotlib is there"
fi
echo ok
