"""Builds the gradex wheel's native parts with CMake (pyproject.toml has the
metadata). The module and the binaries are built by the project's own CMake
build, so the wheel holds exactly what `scripts/build` makes:

  GRADEX_BUILD_DIR      the CMake build to take them from (default: build/,
                        configured as scripts/build does when missing)
  GRADEX_WHEEL_NO_BUILD=1  take them as they are, without running CMake (a
                        test packages a build ctest already has)

The binaries go into the wheel's scripts (pip puts them on the venv's PATH);
gradex._C links the Debian libraries it was built with (gRPC, protobuf,
UCX, absl; libcudart.so.13 in a CUDA build), so the wheel is for Debian 12.
"""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from distutils.command.build_scripts import build_scripts  # setuptools 66 has no own

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("GRADEX_BUILD_DIR", os.path.join(ROOT, "build")))
BINARIES = ["gradex-coordinator", "gradex-agent", "gradex-bench"]
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
os.makedirs(BUILD, exist_ok=True)


def module_path():
    return os.path.join(BUILD, "python", "gradex", "_C" + SUFFIX)


def cmake_build():
    """Builds _C (for this interpreter) and the binaries, once per command run."""
    if os.environ.get("GRADEX_WHEEL_NO_BUILD") == "1" or getattr(cmake_build, "done", False):
        return
    cmake_build.done = True
    if not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        subprocess.check_call(["cmake", "-S", ROOT, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release",
                               "-DGRADEX_CUDA=" + os.environ.get("GRADEX_CUDA", "AUTO"),
                               "-DGRADEX_PYTHON=" + sys.executable])
    subprocess.check_call(["cmake", "--build", BUILD, "-j", str(os.cpu_count() or 2),
                           "--target", "gradex_python", *BINARIES])


def require(path, what):
    if not os.path.exists(path):
        sys.exit(f"gradex wheel: {what} {path} is missing; build it (scripts/build) or unset "
                 "GRADEX_WHEEL_NO_BUILD. The module is built for the Python CMake was "
                 f"configured with (GRADEX_PYTHON); this is {sys.executable}.")


class BuildPyWithModule(build_py):
    """The pure-Python package, plus gradex._C from the CMake build."""

    def run(self):
        super().run()
        cmake_build()
        require(module_path(), "the module")
        out = os.path.join(self.build_lib, "gradex")
        os.makedirs(out, exist_ok=True)
        shutil.copy2(module_path(), out)


class CopyBinaries(build_scripts):
    """The binaries as they are: distutils' build_scripts would read them as
    text to rewrite a #! line, and ELF files have none."""

    def run(self):
        cmake_build()
        os.makedirs(self.build_dir, exist_ok=True)
        for name in BINARIES:
            src = os.path.join(BUILD, "bin", name)
            require(src, "the binary")
            shutil.copy2(src, os.path.join(self.build_dir, name))


class NativeDistribution(Distribution):
    """A wheel tagged for this CPython and platform (cp311-cp311-linux_x86_64)."""

    def has_ext_modules(self):
        return True


setup(
    distclass=NativeDistribution,
    cmdclass={"build_py": BuildPyWithModule, "build_scripts": CopyBinaries},
    # Named so that build_scripts runs; CopyBinaries takes them from the build.
    scripts=[os.path.join("bin", b) for b in BINARIES],
    # setuptools' own files go into the CMake build, not the source tree.
    options={"build": {"build_base": os.path.join(BUILD, "setuptools")},
             "egg_info": {"egg_base": BUILD}},
)
