#!/usr/bin/env bash
# gradex-transport-bench over UCX between two processes, small sizes: exits 0,
# prints a bandwidth row per size, receives of 64 KiB and more posted directly
# into buffers given back by the ones before them (the profile lines), and
# rejects a bad size naming it.
set -euo pipefail
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
out=$(timeout 100 "$bin" --min_size 64KiB --max_size 1MiB --iters 32 --perftest=false 2>&1) ||
  fail "exit $?: $out"
echo "$out"
for size in 65536 262144 1048576; do
  grep -Eq "^ +$size +32 \| +[0-9.]+ +[0-9.]+ " <<<"$out" || fail "no bandwidth row for $size"
  # After the warm-up window, a receive is posted with the buffer the one
  # before it gave back (Recycle): at least 3 in 4 of the 32 timed ones (one
  # whose predecessor's message was not yet probed stays probed, to keep the
  # order). The probed run posts none.
  n=$(grep -E "direct +$size B:" <<<"$out" | sed -E 's|.*; ([0-9]+)/32 posted direct.*|\1|')
  [[ $n =~ ^[0-9]+$ && $n -ge 24 ]] || fail "$size: $n of 32 posted direct"
  grep -Eq "probed +$size B:.*; 0/32 posted direct" <<<"$out" || fail "$size: probed run posted"
done
rc=0
err=$("$bin" --min_size 12XB 2>&1) || rc=$?
[[ $rc -eq 2 ]] || fail "bad size: exit $rc, want 2"
grep -q "12XB" <<<"$err" || fail "bad size not named: $err"
echo PASS
