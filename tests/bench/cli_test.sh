#!/usr/bin/env bash
# gradex-bench's command line: --help works, bad flags fail with a message.
set -euo pipefail
bin=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$bin" --help) || fail "--help exited non-zero"
for flag in --algo --ranks --elements --density --teams --iters --warmup --transport --seed \
  --json --dump --deadline-ms --rank-wrapper --ranks-per-node --node-of-rank --hierarchy; do
  grep -q -- "$flag" <<<"$out" || fail "--help does not explain $flag"
done

expect_bad() {
  local want=$1
  shift
  local err rc=0
  err=$("$bin" "$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc -ne 0 ]] || fail "'$*' exited 0"
  grep -qi -- "$want" <<<"$err" || fail "'$*': message '$err' does not mention '$want'"
  echo "ok: $* -> rc=$rc: $err"
}
expect_bad "unknown flag" --bogus
expect_bad "--ranks" --ranks 0
expect_bad "--ranks" --ranks four
expect_bad "--density" --density 2
expect_bad "--density" --density 0
expect_bad "--elements" --elements -5
expect_bad "needs a value" --ranks
expect_bad "--transport" --transport carrier-pigeon
expect_bad "unknown algorithm" --algo no-such-algo --transport loopback
expect_bad "does not divide" --ranks 4 --teams 3
expect_bad "--iters" --iters 0
expect_bad "unexpected argument" stray
expect_bad "takes no value" --json=yes
expect_bad "does not divide" --ranks 4 --ranks-per-node 3
expect_bad "--hierarchy" --hierarchy on
expect_bad "names 3 nodes" --ranks 4 --node-of-rank a,a,b
expect_bad "exclude each other" --ranks 4 --ranks-per-node 2 --node-of-rank a,a,b,b
echo PASS
