#!/usr/bin/env bash
# other_cpython_test.sh PYTHON MODULE_DIR: gradex._C built for another CPython
# (python/CMakeLists.txt's GRADEX_EXTRA_PYTHONS) imports under that
# interpreter, with no torch, and names this build.
set -euo pipefail
py=$1
dir=$2
version=$3
out=$(cd / && env -u PYTHONPATH PYTHONPATH="$(dirname "$dir")" "$py" -c '
import sys, gradex, gradex._C
assert gradex._C.__file__.startswith(sys.argv[1]), gradex._C.__file__
print(sys.version.split()[0], gradex.__version__, gradex._C.__file__)
' "$dir") || { echo "FAIL: $py cannot import gradex._C from $dir: $out" >&2; exit 1; }
echo "ok: Python $out"
[[ "$out" == *" $version "* ]] || { echo "FAIL: version is not $version" >&2; exit 1; }
echo PASS
