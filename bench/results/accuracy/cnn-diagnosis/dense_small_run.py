"""Experiment: train_fashion_mnist.py with every 1-D parameter (biases) of a
bucket allreduced dense, with its own dense momentum, beside gradex's sparse
exchange of the rest (PowerSGD's hook does this for rank-1 tensors)."""
import os
import sys

sys.path.insert(0, "/work/main/examples")
import torch
import torch.distributed as dist
import gradex.torch as gx
import train_fashion_mnist as tf

MOMENTUM = float(os.environ.get("DENSE_SMALL_MOMENTUM", "0.9"))
orig = gx.gradex_hook
velocity = {}


def hook(state, bucket):
    buf = bucket.buffer()
    slices, off = [], 0
    for p in bucket.parameters():
        n = p.numel()
        if p.dim() <= 1:
            slices.append((off, n))
        off += n
    if not slices:
        return orig(state, bucket)
    g = torch.cat([buf[o:o + n] for o, n in slices]).clone()
    for o, n in slices:
        buf[o:o + n].zero_()
    dist.all_reduce(g)
    g /= dist.get_world_size()
    key = tuple(slices)
    u = velocity.get(key)
    u = g if u is None else u.mul_(MOMENTUM).add_(g)
    velocity[key] = u
    fut = orig(state, bucket)

    def fix(f):
        v = f.value()
        t = v[0] if isinstance(v, list) else v
        k = 0
        for o, n in slices:
            t[o:o + n].copy_(u[k:k + n])
            k += n
        return v

    return fut.then(fix)


gx.gradex_hook = hook
sys.exit(tf.main())
