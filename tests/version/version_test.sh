#!/usr/bin/env bash
# version_test.sh SOURCE_DIR NAME=BINARY...: each binary's --version prints
# "NAME VERSION (git ..., CUDA ..., UCX ..., wire protocol N)" and exits 0,
# and helm/gradex/Chart.yaml's appVersion is VERSION.
set -euo pipefail
src=$1
shift
fail() { echo "FAIL: $*" >&2; exit 1; }
version=$(head -n1 "$src/VERSION")
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || fail "VERSION '$version' is not MAJOR.MINOR.PATCH"
app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/helm/gradex/Chart.yaml")
[[ "$app" == "$version" ]] || fail "Chart.yaml appVersion '$app' is not VERSION '$version'"
(($# >= 3)) || fail "only $# binaries given"
for pair in "$@"; do
  name=${pair%%=*}
  bin=${pair#*=}
  rc=0
  out=$("$bin" --version 2>&1) || rc=$?
  ((rc == 0)) || fail "$name --version exited $rc: $out"
  [[ "$out" =~ ^$name\ $version\ \(git\ [^,]+,\ CUDA\ [^,]+,\ UCX\ [0-9.]+,\ wire\ protocol\ [0-9]+\)$ ]] ||
    fail "$name --version printed '$out'"
  echo "ok: $out"
done
echo PASS
