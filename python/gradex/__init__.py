"""gradex: coordinated sparse gradient exchange for data-parallel training.

The PyTorch integration is ``gradex.torch`` (GradexState, gradex_hook). Every
failure the C++ client reports is raised as ``gradex.GradexError`` (a
RuntimeError) carrying the client's message.

``gradex.build_info`` names the build (version, git, cuda, the UCX it was
built with) and, under ``ucx_runtime``, the UCX this process loaded and the
transports it offers. A wheel carries its own UCX; GRADEX_SYSTEM_UCX=1 loads
the host's instead (an RDMA node's UCX has the drivers the wheel's lacks).
"""
import os as _os


def _load_system_ucx():
    # gradex._C names UCX by its soname (libucp.so.0, ...): a library with that
    # soname already loaded satisfies it, so loading the host's first, found by
    # the dynamic linker's own search (LD_LIBRARY_PATH, ld.so.cache), makes
    # _C use it instead of the wheel's copy in gradex.libs.
    import ctypes
    for name in ("libucs.so.0", "libucm.so.0", "libuct.so.0", "libucp.so.0"):
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise ImportError(f"GRADEX_SYSTEM_UCX=1 but the system's UCX cannot be loaded ({e}); "
                              "install UCX (Debian: libucx0) or unset GRADEX_SYSTEM_UCX to use "
                              "the UCX in the wheel") from e


if _os.environ.get("GRADEX_SYSTEM_UCX", "") not in ("", "0"):
    _load_system_ucx()

from gradex._C import Client, GradexError, __version__  # noqa: E402

__all__ = ["Client", "GradexError", "__version__", "build_info"]


def __getattr__(name):
    # build_info is made on first use: asking UCX for its transports starts a
    # UCX context (tens of ms, device probing on RDMA nodes), which `import
    # gradex` alone should not do.
    if name == "build_info":
        from gradex import _C
        info = dict(_C.build_info)
        ucx = _C.ucx_runtime()
        ucx.pop("context", None)
        ucx["source"] = "wheel" if "/gradex.libs/" in ucx["library"] else "system"
        info["ucx_runtime"] = ucx
        globals()["build_info"] = info
        return info
    raise AttributeError(f"module 'gradex' has no attribute {name!r}")


def ucx_info():
    """The UCX context's full description (ucp_context_print_info): components,
    memory domains and every transport/device resource."""
    from gradex import _C
    return _C.ucx_runtime()["context"]
