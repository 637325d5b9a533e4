#!/usr/bin/env bash
# wheel_libs_test.sh SOURCE_DIR BUILD_DIR: the wheels scripts/build-wheels makes
# from BUILD_DIR (no second build) carry what they link.
#   1. `scripts/wheel-repair check` on the unrepaired wheel must fail and name a
#      library from this machine (the check can see one);
#   2. every repaired wheel passes it (ldd on every ELF: nothing from outside
#      the wheel but glibc, libstdc++/libgcc, the CUDA driver, RDMA drivers);
#   3. the platform tag is manylinux_2_NN with NN the highest GLIBC_2.NN any
#      ELF in the wheel needs (objdump -T, counted here independently);
#   4. the wheel's gradex._C, imported with only the wheel on the path, maps
#      UCX, gRPC, protobuf and abseil from gradex.libs and UCX's cma plugin
#      from gradex.libs/ucx, and build_info's ucx_runtime says so.
# Exit 77 (skip) without patchelf, python3-build or the module.
set -euo pipefail
src=$1
build=$2
py=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
command -v patchelf >/dev/null || skip "no patchelf (apt-get install patchelf)"
"$py" -c 'import build, wheel, setuptools' 2>/dev/null || skip "$py lacks python3-build/python3-wheel"
ls "$build"/python/gradex/_C.*.so >/dev/null 2>&1 || skip "no gradex._C in $build"
variant=cpu
# grep without -q: under pipefail an early exit would SIGPIPE ldd and hide the match.
if ldd "$build"/python/gradex/_C.*.so | grep libcudart >/dev/null; then variant=cu13; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

(cd "$src" && GRADEX_BUILD_DIR="$build" GRADEX_WHEEL_NO_BUILD=1 \
  "$py" -m build --wheel --no-isolation --outdir "$tmp/raw" >"$tmp/raw.log" 2>&1) ||
  { tail -n 20 "$tmp/raw.log"; fail "python3 -m build"; }
if out=$("$src/scripts/wheel-repair" check "$tmp"/raw/*.whl); then
  fail "the check passed a wheel that links this machine's libraries: $out"
fi
grep -q "libgrpc.*=> /.*(outside the wheel)" <<<"$out" || fail "the check did not name libgrpc: $out"
echo "ok: the check fails the unrepaired wheel ($(grep -c 'outside the wheel' <<<"$out") libraries from the host)"

"$src/scripts/build-wheels" --variant $variant --no-build --build-dir "$build" --out "$tmp/dist" \
  >"$tmp/wheels.log" 2>&1 || { cat "$tmp/wheels.log"; fail "scripts/build-wheels"; }
grep '^ok ' "$tmp/wheels.log"
n=0
for whl in "$tmp"/dist/*.whl; do
  n=$((n + 1))
  name=$(basename "$whl")
  x=$tmp/x/$name
  mkdir -p "$x"
  "$py" -m zipfile -e "$whl" "$x"
  floor=0
  while read -r f; do
    v=$(objdump -T "$f" | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_2\.//' | sort -n | tail -n1 || true)
    if [[ -n $v && $v -gt $floor ]]; then floor=$v; fi
  done < <(find "$x" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print)
  [[ $name == *-manylinux_2_${floor}_x86_64.whl ]] || fail "$name: the highest GLIBC_2.N needed is 2.$floor"
  ls "$x"/gradex.libs/ucx/libuct_cma.so.0 >/dev/null || fail "$name has no UCX plugins"
  echo "ok: $name: glibc floor 2.$floor, $(du -k "$whl" | cut -f1) KiB"
done
[[ $n -ge 1 ]] || fail "no wheels"

# The wheel for this Python: its _C and libraries as installed, nothing else.
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
x=$(ls -d "$tmp"/x/*-$tag-$tag-*.whl)
(cd / && env -i PATH=/usr/bin:/bin PYTHONPATH="$x" GRADEX_TEST_ROOT="$x" "$py" -c '
import os, gradex
info = gradex.build_info
ucx = info["ucx_runtime"]
root = os.environ["GRADEX_TEST_ROOT"]
# RUNPATH $ORIGIN/../gradex.libs: paths come as .../gradex/../gradex.libs/...
maps = "\n".join(os.path.normpath(l.split()[-1]) for l in open("/proc/self/maps") if "/" in l)
assert os.path.normpath(ucx["library"]).startswith(root + "/gradex.libs/"), ucx
assert ucx["source"] == "wheel", ucx
assert any(t.startswith("tcp/") for t in ucx["transports"]), ucx
assert "cma" in ucx["components"], ucx
for lib in ("libucp.so.0", "libucs.so.0", "libgrpc-", "libprotobuf-", "libabsl_base-", "ucx/libuct_cma.so.0"):
    assert root + "/gradex.libs/" + lib in maps, (lib, "not mapped from the wheel")
host = [l for l in maps.splitlines()
        if "/usr/lib/x86_64-linux-gnu/" in l and any(k in l for k in ("grpc", "protobuf", "absl", "libuc"))]
assert not host, host
print("ok: gradex._C from the wheel:", ucx["version"], ucx["library"], ucx["transports"])
') || fail "gradex._C from the wheel"
echo "ok: $n wheels in $((SECONDS - start)) s"
echo PASS
