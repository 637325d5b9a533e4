"""The rendezvous of gradex's Python clients through torch.distributed's
default store: used by the DDP hook's state (gradex.torch) and the parameter
server's workers (gradex.dgs), so that neither imports the other for it."""
import datetime

import torch.distributed as dist

from gradex._C import GradexError


def store_rendezvous(prefix, timeout_s):
    """Rank 0 sets, the others wait (up to timeout_s) and get, through
    torch.distributed's default store; (None, None) without one."""
    if not (dist.is_available() and dist.is_initialized()):
        return None, None
    store = dist.distributed_c10d._get_default_store()
    timeout = datetime.timedelta(seconds=timeout_s)

    def set_(key, value):
        store.set(prefix + key, value)

    def get(key):
        try:
            store.wait([prefix + key], timeout)
        except RuntimeError as e:
            raise GradexError(
                f"gradex: rank 0 did not publish '{key}' in the store within {timeout_s} s ({e})"
            ) from None
        return store.get(prefix + key)

    return set_, get
