"""gradex.torch.DGSOptimizer: asynchronous training through gradex's parameter
server, with DGS's dual-way sparsification (the seed ``dgs.txt``) or plain ASGD
(``density=1``).

    import gradex.torch as gx
    opt = gx.DGSOptimizer(model.parameters(), lr=0.05, density=0.01)
    for x, y in loader:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()          # one push-pull with the server; parameters updated
    opt.close()

No DDP and no barrier: each worker steps on its own. ``step()`` hands the
gradients (one flat float32 buffer, parameters in order, one layer each) to
``gradex._C.PsWorker.step``, which keeps SAMomentum's accumulator u = m*u +
lr*(g + wd*w), pushes the top R per layer of u (R = density*lr/lr0), and adds
the server's sparse model difference into the parameters (or replaces them by
the whole model at a full sync: on join and every 150 versions). The exact
same math in pure PyTorch is ``gradex.dgs_reference``.
"""
import atexit
import weakref

import torch

import gradex._C as _C
from gradex._C import GradexError
from gradex.rendezvous import store_rendezvous

__all__ = ["DGSOptimizer"]


def _ps_worker_class():
    cls = getattr(_C, "PsWorker", None)
    if cls is None:
        raise GradexError(
            "UNIMPLEMENTED: this gradex build has no parameter-server client "
            "(gradex._C.PsWorker); rebuild gradex with ps/ps_worker")
    return cls


def _close_ref(ref):
    opt = ref()
    if opt is not None:
        try:
            opt.close()
        except Exception:  # exiting: nothing left to tell
            pass


class DGSOptimizer(torch.optim.Optimizer):
    """A worker of an asynchronous parameter-server job (DGS, or ASGD at density 1).

    Args:
        params: the model's parameters (float32, CPU), or param groups that all
            share one lr (the server applies one step size per push).
        lr: learning rate (may be changed in ``param_groups`` between steps, as
            schedulers do); the first one is lr0, against which R scales.
        momentum: SAMomentum's m, in (0, 1] (unsent entries are divided by it).
        weight_decay: wd in u = m*u + lr*(g + wd*w).
        density: fraction of each layer sent per step each way, in (0, 1];
            1 is ASGD (dense push, dense pull).
        max_staleness: versions a worker may run ahead of its last pull before
            its step waits (None: unbounded; else >= workers - 1).
        timeout_s: deadline of joining and of every step; a server that is gone
            is a GradexError within it.
        coordinator, token: as GradexState (default: ``GRADEX_COORDINATOR``,
            ``GRADEX_TOKEN``/``GRADEX_TOKEN_FILE``); with torch.distributed
            initialised, rank 0's embedded coordinator is found through its store.
        lr0: the reference lr of R's scaling (default: lr).
        **options: further keywords of ``gradex._C.PsWorker``: the client's
            (job, rank, world_size, data_ip, metrics_port, ...) and, for the
            server rank 0 hosts when it embeds the coordinator, server_shards,
            snapshot_dir, snapshot_interval_s.
    """

    def __init__(self, params, lr, momentum=0.9, weight_decay=5e-4, density=0.01,
                 max_staleness=None, timeout_s=60.0, coordinator=None, token=None, *,
                 lr0=None, **options):
        if not lr > 0:
            raise ValueError(f"gradex: lr must be > 0, got {lr}")
        if not 0 < momentum <= 1:
            raise ValueError(f"gradex: momentum must be in (0, 1], got {momentum}")
        if not weight_decay >= 0:
            raise ValueError(f"gradex: weight_decay must be >= 0, got {weight_decay}")
        if not 0 < density <= 1:
            raise ValueError(f"gradex: density must be in (0, 1], got {density}")
        if max_staleness is not None and (isinstance(max_staleness, bool) or
                                          int(max_staleness) != max_staleness or max_staleness < 1):
            raise ValueError(f"gradex: max_staleness must be None (unbounded) or an integer >= 1 "
                             f"(>= workers - 1), got {max_staleness}")
        if not timeout_s > 0:
            raise ValueError(f"gradex: timeout_s must be > 0, got {timeout_s}")
        worker_class = _ps_worker_class()  # before touching the parameters
        super().__init__(params, dict(lr=float(lr)))
        plist = [p for g in self.param_groups for p in g["params"]]
        for p in plist:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"gradex: DGSOptimizer takes float32 CPU parameters, got "
                                f"{p.dtype} on {p.device}")
        if not plist:
            raise ValueError("gradex: DGSOptimizer got no parameters")
        self._params = plist
        self.layer_sizes = [p.numel() for p in plist]
        total = sum(self.layer_sizes)
        # The parameters become views of one flat buffer, which the C++ step
        # updates in place; gradients are gathered into a second one.
        self._flat = torch.empty(total, dtype=torch.float32)
        off = 0
        with torch.no_grad():
            for p in plist:
                n = p.numel()
                self._flat[off:off + n].copy_(p.reshape(-1))
                p.data = self._flat[off:off + n].view_as(p)
                off += n
        self._grad = torch.zeros(total, dtype=torch.float32)
        self.density = float(density)
        self.lr0 = float(lr if lr0 is None else lr0)
        self.max_staleness = max_staleness
        options.update(coordinator=coordinator, token=token, timeout_s=float(timeout_s))
        self._worker = self._create_worker(worker_class, options, timeout_s, momentum,
                                           weight_decay)
        atexit.register(_close_ref, weakref.ref(self))

    def _create_worker(self, cls, options, timeout_s, momentum, weight_decay):
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            options.setdefault("rank", dist.get_rank())
            options.setdefault("world_size", dist.get_world_size())
        rdv_set, rdv_get = store_rendezvous("gradex/ps/", timeout_s)
        return cls(self.layer_sizes, density=self.density, momentum=float(momentum),
                   weight_decay=float(weight_decay), lr0=self.lr0,
                   max_staleness=0 if self.max_staleness is None else int(self.max_staleness),
                   use_environment=True, rendezvous_set=rdv_set, rendezvous_get=rdv_get,
                   **options)

    @property
    def worker(self):
        if self._worker is None:
            raise GradexError("FAILED_PRECONDITION: this DGSOptimizer is closed")
        return self._worker

    def _lr(self):
        lrs = {g["lr"] for g in self.param_groups}
        if len(lrs) != 1:
            raise ValueError(f"gradex: DGSOptimizer applies one lr per step; groups have {lrs}")
        return float(lrs.pop())

    @torch.no_grad()
    def step(self, closure=None):
        """One push-pull with the server (blocks up to timeout_s). A parameter
        without a gradient pushes zeros for it (its momentum still decays)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        off = 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                self._grad[off:off + n].zero_()
            else:
                self._grad[off:off + n].copy_(p.grad.reshape(-1))
            off += n
        self.worker.step(self._grad, self._flat, self._lr())
        return loss

    def stats(self):
        """The worker's dict: version, staleness, bytes each way, pushes, ..."""
        return self.worker.stats()

    def state_dict(self):
        """param_groups (lr) and the DGS options. The SAMomentum accumulator and
        the model live on the server side's terms: a restored worker re-joins
        and gets the whole model (a full sync)."""
        state = super().state_dict()
        state["dgs"] = dict(version=1, layer_sizes=list(self.layer_sizes),
                            density=self.density, lr0=self.lr0)
        return state

    def load_state_dict(self, state):
        dgs = state.get("dgs") if isinstance(state, dict) else None
        if not dgs or dgs.get("version") != 1:
            raise ValueError("gradex: not a DGSOptimizer.state_dict() (version 1)")
        if list(dgs.get("layer_sizes", [])) != self.layer_sizes:
            raise ValueError(f"gradex: state_dict's layer sizes {dgs.get('layer_sizes')} "
                             f"are not this model's {self.layer_sizes}")
        base = {k: v for k, v in state.items() if k != "dgs"}
        super().load_state_dict(base)

    def close(self):
        """Leaves the job. Idempotent."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
