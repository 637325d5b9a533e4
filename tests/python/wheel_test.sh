#!/usr/bin/env bash
# wheel_test.sh SOURCE_DIR BUILD_DIR: the wheel, as a user installs it.
#   1. `python3 -m build --wheel --no-isolation` packages BUILD_DIR's module and
#      binaries (GRADEX_WHEEL_NO_BUILD: what ctest built, no second build) into
#      gradex-VERSION-cpXY-cpXY-linux_x86_64.whl with the package, _C, the
#      binaries as scripts and the LICENSE;
#   2. it installs with pip into a fresh `python3 -m venv --system-site-packages`
#      (no index: torch and numpy are Debian's), where gradex and the binaries
#      come from the venv, and the hook's test runs (tests/python/torch_hook_test.py:
#      every phase, a short training);
#   3. `pip uninstall -y gradex` leaves no gradex file in the venv.
# Exit 77 (skip) where python3-build, python3-venv or the module is missing.
set -euo pipefail
src=$1
build=$2
py=${GRADEX_PYTHON:-/usr/bin/python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
"$py" -c 'import build, wheel, setuptools, venv' 2>/dev/null ||
  skip "$py lacks build/wheel/setuptools/venv (scripts/install-deps installs python3-build python3-wheel python3-setuptools python3-venv)"
ls "$build"/python/gradex/_C.*.so >/dev/null 2>&1 || skip "no gradex._C in $build (no torch for $py?)"
version=$(head -n1 "$src/VERSION")
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start=$SECONDS
(cd "$src" && GRADEX_BUILD_DIR="$build" GRADEX_WHEEL_NO_BUILD=1 \
  "$py" -m build --wheel --no-isolation --outdir "$tmp/dist" >"$tmp/build.log" 2>&1) ||
  { tail -30 "$tmp/build.log"; fail "python3 -m build failed"; }
whl=$(ls "$tmp"/dist/*.whl)
name=$(basename "$whl")
[[ "$name" == "gradex-$version-$tag-$tag-linux_x86_64.whl" ]] || fail "wheel named $name"
echo "ok: built $name ($(du -k "$whl" | cut -f1) KiB) in $((SECONDS - start)) s"
listing=$("$py" -m zipfile -l "$whl")
for f in gradex/__init__.py gradex/torch.py "gradex/_C.cpython-${tag#cp}-" "gradex-$version.data/scripts/gradex-coordinator" \
  "gradex-$version.data/scripts/gradex-agent" "gradex-$version.data/scripts/gradex-bench" \
  "gradex-$version.dist-info/LICENSE"; do
  grep -q -- "$f" <<<"$listing" || fail "the wheel has no $f: $listing"
done

"$py" -m venv --system-site-packages "$tmp/venv"
venv=$tmp/venv
"$venv/bin/python" -m pip install --no-index --disable-pip-version-check -q "$whl" ||
  fail "pip install $name"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
cd "$tmp"  # not the source tree: gradex must come from the venv
env -u PYTHONPATH "$venv/bin/python" - "$venv" "$version" <<'PY' || fail "gradex in the venv"
import sys, gradex, gradex._C, gradex.torch
venv, version = sys.argv[1], sys.argv[2]
assert gradex.__file__.startswith(venv), gradex.__file__
assert gradex.__version__ == version, (gradex.__version__, version)
assert gradex.build_info["version"] == version, gradex.build_info
print("ok: gradex", gradex.__version__, "from", gradex.__file__, gradex.build_info)
PY
for b in gradex-coordinator gradex-agent gradex-bench; do
  out=$(env -u PYTHONPATH PATH="$venv/bin:$PATH" "$b" --version) || fail "$b --version in the venv"
  [[ "$out" == "$b $version "* ]] || fail "$b --version: $out"
  [[ $(command -v "$b" || true) != "$venv/bin/$b" ]] || true
  [[ -x "$venv/bin/$b" ]] || fail "$venv/bin/$b is not executable"
done
echo "ok: gradex-coordinator, gradex-agent, gradex-bench in $venv/bin answer --version"

env -u PYTHONPATH "$venv/bin/python" "$src/tests/python/torch_hook_test.py" --phase all --steps 40 \
  --coordinator-bin "$venv/bin/gradex-coordinator" || fail "the hook test in the venv"

"$venv/bin/python" -m pip uninstall -y -q gradex || fail "pip uninstall gradex"
left=$(find "$site" "$venv/bin" -iname '*gradex*' 2>/dev/null || true)
[[ -z "$left" ]] || fail "pip uninstall left: $left"
echo "ok: pip uninstall left nothing in $site and $venv/bin"
echo PASS
