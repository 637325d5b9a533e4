"""Where a sparse exchange loses what dense training would apply, per layer.

Wraps gradex's DDP hook (train_fashion_mnist.py --diagnose CSV). Each bucket,
before gradex runs, the raw local gradients are summed over ranks with a
plain allreduce (diagnosis only: it adds a dense exchange), giving the dense
mean g. A dense run with SGD momentum m would apply its velocity U <- m*U + g
(the hook's result with the momentum handed over is the update direction, so
U is its dense counterpart). Per layer, every `every` steps, rank 0 writes:

- cos: the cosine of the applied update a and U;
- applied: |a|_1 / |U|_1 (how much of the step's dense mass arrived);
- lag_steps: |sum over steps of (U - a)|_1 / |U|_1, the mass held back so far
  (in residuals and lost momentum) in steps of the current velocity;
- nnz: the fraction of the layer's entries the update touched.

The parameters' trajectory is the sparse run's own, so U is what dense
momentum would apply from where this run is, not dense training's own path.
"""
import csv

import torch
import torch.distributed as dist


class Diagnosis:
    def __init__(self, path, model, momentum, every=10):
        self.path, self.momentum, self.every = path, momentum, every
        self.names = {p.data_ptr(): n for n, p in model.named_parameters()}
        self.velocity, self.held = {}, {}
        self.rows = []
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.step = 0

    def wrap(self, hook):
        def diag_hook(state, bucket):
            # The bucket's first parameter's step: buckets of one step share it.
            if bucket.index() == 0:
                self.step += 1
            dense = bucket.buffer().detach().clone()
            if state._decay:  # as the hook adds it before the velocity
                off = 0
                for p in bucket.parameters():
                    wd = state._decay.get(p.data_ptr())
                    if wd:
                        dense[off:off + p.numel()].add_(p.detach().reshape(-1), alpha=wd)
                    off += p.numel()
            dist.all_reduce(dense)  # blocking, on the autograd thread, in bucket order
            dense /= self.world
            params = list(bucket.parameters())
            step = self.step
            fut = hook(state, bucket)

            def measure(f):
                applied = f.value()[0] if isinstance(f.value(), list) else f.value()
                self._measure(step, params, dense, applied.detach())
                return f.value()

            return fut.then(measure)
        return diag_hook

    def _measure(self, step, params, dense, applied):
        off = 0
        for p in params:
            n = p.numel()
            key = p.data_ptr()
            g, a = dense[off:off + n], applied[off:off + n].float()
            off += n
            u = self.velocity.get(key)
            u = g.clone() if u is None else u.mul_(self.momentum).add_(g)
            self.velocity[key] = u
            h = self.held.get(key)
            h = (u - a) if h is None else h.add_(u).sub_(a)
            self.held[key] = h
            if self.rank != 0 or step % self.every:
                continue
            ul1 = float(u.abs().sum()) or 1e-30
            cos = float(torch.dot(a, u) / ((a.norm() * u.norm()) + 1e-30))
            self.rows.append(dict(step=step, layer=self.names.get(key, str(key)), elements=n,
                                  cos=round(cos, 5), applied=round(float(a.abs().sum()) / ul1, 5),
                                  lag_steps=round(float(h.abs().sum()) / ul1, 3),
                                  nnz=round(float((a != 0).sum()) / n, 5)))

    def write(self, label):
        if self.rank != 0 or not self.rows:
            return
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["run"] + list(self.rows[0].keys()))
            if f.tell() == 0:
                w.writeheader()
            for r in self.rows:
                w.writerow(dict(run=label, **r))
