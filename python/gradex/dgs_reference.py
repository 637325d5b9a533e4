"""An exact pure-PyTorch reference of DGS and ASGD (no C++, no network).

DGS (the seed ``dgs.txt``: dual-way gradient sparsification with SAMomentum;
its constants are in the project's DESIGN.md under "DGS") trains through a
parameter server: each worker pushes the top R% per layer of its SAMomentum
accumulator, the server adds the push into the global model M and returns the
top R% per layer of M - v_k (secondary compression), v_k being what it has
sent to worker k so far. Density 1 is plain ASGD: dense push, dense pull.

The same math as ``ps/dgs_worker`` and ``ps/dgs_server``, in
float32 with the same operation order, so that on integer-valued data (and a
momentum that is a power of two) it is a bitwise oracle for the C++ path. The
rules, all of which the C++ side follows:

* ratio R = density * lr / lr0 (each a float, the product in double), capped
  at 1; density >= 1 is dense (ASGD), whatever lr is. The worker selects at
  R, the server at R rounded to float (the push frame carries a float).
* a layer of n entries sends k = min(n, max(1, ceil(R * n))) entries (n when
  dense): the k largest |x|, ties to the lower index (a stable sort); zeros
  are never sent (fewer than k when the layer has fewer nonzeros).
* worker, per step:  u = m*u + lr*(g + wd*w); the selected entries of u are
  pushed (and keep their value in u); the others are divided by m (SAMomentum:
  an entry sent after T silent steps carries m*u_c + lr*sum(grads), as a
  dense momentum with a T times larger batch would).
* server, per push from worker k:  M[i] -= push[i]; version += 1; then the
  pull: a full sync (the whole M; v_k = M) when k (re)joins or when 150
  versions have passed since k's last full sync; otherwise G = M - v_k, top R
  per layer of |G| (R from the push), v_k[i] += G[i] for the selected i.
  Everything unselected stays in M - v_k: nothing is lost.
* the worker adds a sparse pull into its parameters (w[i] += G[i]) and
  replaces them with a full one, so that its parameters equal v_k bitwise.

Staleness of a push: the server's version minus the version of k's previous
pull (how many other workers' pushes k's gradient did not see).
"""
import math
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch

FULL_SYNC_EVERY = 150  # versions between a worker's full syncs (the seed's authors' code)


def f32(x):
    """x rounded to float32 (the C++ side keeps density, lr, lr0 and the
    push's ratio as float)."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def step_ratio(density, lr, lr0):
    """R of one step: density scaled by lr/lr0 (DESIGN.md), capped at 1; 1 when
    dense. As DgsWorkerState::Ratio: float inputs, double arithmetic."""
    if f32(density) >= 1:
        return 1.0
    return min(1.0, f32(density) * f32(lr) / f32(lr0))


def select_count(n, ratio):
    """Entries a layer of n sends at ratio R (all of them at R = 1)."""
    if ratio >= 1:
        return n
    return min(n, max(1, math.ceil(ratio * n)))


def top_indices(x, k):
    """Indices of the k largest nonzero |x| (ties to the lower index; zeros are
    never selected, so fewer than k when x has fewer nonzeros), ascending."""
    a = x.abs()
    nonzero = torch.nonzero(a).squeeze(1)
    if k >= nonzero.numel():
        return nonzero
    # The k-th largest magnitude (> 0 here); every entry above it, then the
    # lowest-index entries equal to it until k (a stable sort's set, faster).
    kth = torch.topk(a, k, sorted=False).values.min()
    above = torch.nonzero(a > kth).squeeze(1)
    ties = torch.nonzero(a == kth).squeeze(1)[:k - above.numel()]
    return torch.sort(torch.cat([above, ties])).values


class Layout:
    """Per-layer sizes of one flat float32 model and each layer's offset."""

    def __init__(self, sizes):
        self.sizes = [int(s) for s in sizes]
        if not self.sizes or any(s <= 0 for s in self.sizes):
            raise ValueError(f"dgs: every layer needs at least one entry, got {self.sizes}")
        self.offsets = [0]
        for s in self.sizes:
            self.offsets.append(self.offsets[-1] + s)
        self.total = self.offsets[-1]

    def layers(self):
        return zip(self.offsets[:-1], self.sizes)

    def select(self, x, ratio):
        """Flat ascending indices of the top R per layer of x (every nonzero at R = 1)."""
        parts = [top_indices(x[o:o + n], select_count(n, ratio)) + o for o, n in self.layers()]
        return torch.cat(parts)


@dataclass
class Push:
    """What a worker sends: flat indices (ascending) and values, and its R."""
    indices: torch.Tensor
    values: torch.Tensor
    ratio: float


@dataclass
class Pull:
    """What the server returns: a sparse difference, or the whole model (full)."""
    indices: Optional[torch.Tensor]
    values: torch.Tensor
    full: bool
    version: int
    staleness: int = 0


class WorkerRef:
    """One worker's SAMomentum accumulator u (ps/dgs_worker's math)."""

    def __init__(self, layout, lr0, momentum=0.9, weight_decay=5e-4, density=0.01):
        if not 0 < density <= 1:
            raise ValueError(f"dgs: density must be in (0, 1], got {density}")
        if not 0 < momentum <= 1:
            raise ValueError(f"dgs: momentum must be in (0, 1] (unsent entries are divided by it), "
                             f"got {momentum}")
        if not lr0 > 0:
            raise ValueError(f"dgs: lr0 must be > 0, got {lr0}")
        self.layout = layout
        self.lr0 = float(lr0)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.density = float(density)
        self.u = torch.zeros(layout.total, dtype=torch.float32)

    def make_push(self, grad, params, lr):
        """u = m*u + lr*(g + wd*w); returns the top R per layer of u; the unsent
        entries of u are divided by m. grad and params: flat float32."""
        m = torch.tensor(self.momentum, dtype=torch.float32)
        d = grad + torch.tensor(self.weight_decay, dtype=torch.float32) * params
        self.u = m * self.u + torch.tensor(lr, dtype=torch.float32) * d
        ratio = step_ratio(self.density, lr, self.lr0)
        idx = self.layout.select(self.u, ratio)
        if ratio >= 1:  # ASGD: every nonzero, u kept whole
            return Push(idx, self.u[idx].clone(), 1.0)
        # The push carries R as a float: the server's secondary compression
        # selects at that value, the worker at the double.
        values = self.u[idx].clone()
        unsent = torch.ones(self.layout.total, dtype=torch.bool)
        unsent[idx] = False
        self.u[unsent] = self.u[unsent] / m
        return Push(idx, values, f32(ratio))

    @staticmethod
    def apply_pull(pull, params):
        """Adds a sparse pull into params (in place), or replaces them by a full one."""
        if pull.full:
            params.copy_(pull.values)
        else:
            params[pull.indices] = params[pull.indices] + pull.values


@dataclass
class _Peer:
    v: torch.Tensor
    last_full: int
    pulled: int


@dataclass
class ServerRef:
    """The server shard: global model M, version, per worker v_k
    (ps/dgs_server's math). One shard holds the whole layout here."""
    layout: Layout
    model: torch.Tensor
    full_sync_every: int = FULL_SYNC_EVERY
    max_staleness: Optional[int] = None
    version: int = 0
    peers: Dict[int, _Peer] = field(default_factory=dict)
    staleness: List[int] = field(default_factory=list)
    sent_entries: int = 0
    recv_entries: int = 0

    def __post_init__(self):
        self.model = self.model.detach().to(torch.float32).clone()

    def join(self, k):
        """k (re)joins: the whole model, v_k = M."""
        self.peers[k] = _Peer(self.model.clone(), self.version, self.version)
        return Pull(None, self.model.clone(), True, self.version)

    def staleness_of(self, k):
        return self.version - self.peers[k].pulled

    def push_pull(self, k, push):
        """Applies k's push to M and returns k's pull."""
        peer = self.peers.get(k)
        if peer is None:
            raise KeyError(f"dgs: worker {k} has not joined")
        stale = self.version - peer.pulled
        if self.max_staleness is not None and stale > self.max_staleness:
            raise ValueError(f"dgs: worker {k} is {stale} versions behind "
                             f"(max_staleness {self.max_staleness})")
        self.staleness.append(stale)
        self.model[push.indices] = self.model[push.indices] - push.values
        self.recv_entries += push.indices.numel()
        self.version += 1
        peer.pulled = self.version
        if self.version - peer.last_full >= self.full_sync_every:
            peer.v = self.model.clone()
            peer.last_full = self.version
            self.sent_entries += self.layout.total
            return Pull(None, self.model.clone(), True, self.version, stale)
        diff = self.model - peer.v
        idx = self.layout.select(diff, push.ratio)
        values = diff[idx].clone()
        peer.v[idx] = peer.v[idx] + values
        self.sent_entries += idx.numel()
        return Pull(idx, values, False, self.version, stale)


def flat_params(params):
    return torch.cat([p.detach().reshape(-1).to(torch.float32) for p in params])


def flat_grads(params):
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach()
                      .reshape(-1).to(torch.float32) for p in params])


def unflatten_into(flat, params):
    """Copies a flat float32 vector back into the parameters (in place)."""
    off = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[off:off + n].view_as(p))
            off += n
