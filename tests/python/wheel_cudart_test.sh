#!/usr/bin/env bash
# wheel_cudart_test.sh SOURCE_DIR BUILD_DIR: the cu13 wheel carries no CUDA
# runtime of its own (a process with torch cu13 must load one libcudart, not
# torch's and a hash-renamed second one). On the wheel scripts/build-wheels
# makes from a CUDA BUILD_DIR (no second build):
#   1. no file in it is a libcudart; its gradex._C needs libcudart.so.13 under
#      that soname, with site-packages/nvidia/cu13/lib (NVIDIA's runtime wheel,
#      torch cu13's) in its RUNPATH after gradex.libs, and METADATA requires
#      nvidia-cuda-runtime>=13,<14;
#   2. installed as pip lays it out beside a stand-in nvidia/cu13/lib (the
#      toolkit's libcudart copied there), gradex._C resolves libcudart from
#      there: the file torch would load;
#   3. `wheel-repair check` fails the same wheel with a libcudart added, and
#      without the requirement, naming each.
# Exit 77 (skip) without patchelf, python3-build, the module, or on a build
# without CUDA.
set -euo pipefail
src=$1
build=$2
py=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
command -v patchelf >/dev/null || skip "no patchelf (apt-get install patchelf)"
"$py" -c 'import build, wheel, setuptools' 2>/dev/null || skip "$py lacks python3-build/python3-wheel"
ls "$build"/python/gradex/_C.*.so >/dev/null 2>&1 || skip "no gradex._C in $build"
# grep without -q: under pipefail an early exit would SIGPIPE ldd and hide the match.
cudart=$(ldd "$build"/python/gradex/_C.*.so | sed -n 's/^\s*libcudart\.so\.13 => \(\S*\) .*/\1/p')
[[ -n $cudart ]] || skip "$build is not a CUDA build (its gradex._C links no libcudart.so.13)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$src/scripts/build-wheels" --variant cu13 --no-build --build-dir "$build" --out "$tmp/dist" \
  >"$tmp/wheels.log" 2>&1 || { cat "$tmp/wheels.log"; fail "scripts/build-wheels"; }
grep -q "libcudart.so.13 from the host, not the wheel: requires nvidia-cuda-runtime>=13,<14" \
  "$tmp/wheels.log" || { cat "$tmp/wheels.log"; fail "wheel-repair did not say where libcudart comes from"; }
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
whl=$(ls "$tmp"/dist/gradex_cu13-*-"$tag"-"$tag"-*.whl)

# 1. The file list, the module's needs, RUNPATH and requirement.
list=$("$py" -m zipfile -l "$whl")
if grep -i 'libcudart' <<<"$list"; then fail "the wheel carries a CUDA runtime (above)"; fi
echo "ok: no libcudart among the wheel's $(grep -c . <<<"$list") entries"
site=$tmp/site/lib/python3/site-packages
mkdir -p "$site"
"$py" -m zipfile -e "$whl" "$site"
mod=$(ls "$site"/gradex/_C.*.so)
needs=$(readelf -d "$mod")
grep -q 'NEEDED.*\[libcudart\.so\.13\]' <<<"$needs" || fail "gradex._C does not need libcudart.so.13 by its soname"
rp=$(patchelf --print-rpath "$mod")
[[ $rp == '$ORIGIN/../gradex.libs:$ORIGIN/../nvidia/cu13/lib' ]] ||
  fail "gradex._C's RUNPATH is '$rp', not gradex.libs then nvidia/cu13/lib"
echo "ok: gradex._C needs libcudart.so.13 under its soname; RUNPATH $rp"
meta=$(cat "$site"/gradex_cu13-*.dist-info/METADATA)
grep -qx 'Requires-Dist: nvidia-cuda-runtime>=13,<14' <<<"$meta" ||
  fail "METADATA does not require nvidia-cuda-runtime>=13,<14: $(grep '^Requires' <<<"$meta")"
echo "ok: METADATA requires nvidia-cuda-runtime>=13,<14"

# 2. Beside a stand-in of NVIDIA's runtime wheel, that runtime is the one.
mkdir -p "$site/nvidia/cu13/lib"
cp "$(realpath "$cudart")" "$site/nvidia/cu13/lib/libcudart.so.13"
got=$(env -i PATH=/usr/bin:/bin ldd "$mod" | sed -n 's/^\s*libcudart\.so\.13 => \(\S*\) .*/\1/p')
[[ $(realpath "$got") == "$(realpath "$site/nvidia/cu13/lib/libcudart.so.13")" ]] ||
  fail "gradex._C resolves libcudart.so.13 to '$got', not the runtime wheel's"
echo "ok: installed beside nvidia/cu13/lib, gradex._C loads its libcudart.so.13 ($got)"

# 3. The check catches a carried runtime and a missing requirement.
"$py" - "$whl" "$tmp/carried.whl" "$tmp/unrequired.whl" "$cudart" <<'PY'
import re, sys, zipfile
src, carried, unrequired, cudart = sys.argv[1:]
with zipfile.ZipFile(src) as z:
    items = [(i, z.read(i)) for i in z.infolist()]
with zipfile.ZipFile(carried, "w") as z:
    for i, data in items:
        z.writestr(i, data)
    z.writestr("gradex.libs/libcudart-0123abcd.so.13", open(cudart, "rb").read())
with zipfile.ZipFile(unrequired, "w") as z:
    for i, data in items:
        if i.filename.endswith(".dist-info/METADATA"):
            data = re.sub(rb"^Requires-Dist: nvidia-cuda-runtime.*\n", b"", data, flags=re.M)
        z.writestr(i, data)
PY
for bad in carried unrequired; do
  cp "$tmp/$bad.whl" "$tmp/gradex_cu13-0-$tag-$tag-manylinux_2_34_x86_64.whl"
  if out=$("$src/scripts/wheel-repair" check "$tmp/gradex_cu13-0-$tag-$tag-manylinux_2_34_x86_64.whl"); then
    fail "the check passed the $bad wheel: $out"
  fi
  case $bad in
    carried) want="a CUDA runtime in the wheel" ;;
    unrequired) want="libcudart.so.13, but the wheel does not require nvidia-cuda-runtime>=13,<14" ;;
  esac
  grep -qF "$want" <<<"$out" || fail "the check of the $bad wheel did not say '$want': $out"
  echo "ok: the check fails the $bad wheel: $(grep -F "$want" <<<"$out" | head -1 | sed 's/^ *//')"
done
