"""gradex: coordinated sparse gradient exchange for data-parallel training.

The PyTorch integration is ``gradex.torch`` (GradexState, gradex_hook). Every
failure the C++ client reports is raised as ``gradex.GradexError`` (a
RuntimeError) carrying the client's message.
"""
from gradex._C import Client, GradexError, __version__, build_info

__all__ = ["Client", "GradexError", "__version__", "build_info"]
