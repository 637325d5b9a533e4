"""N asynchronous workers and one parameter server simulated in one process,
with gradex.dgs_reference's exact math (examples/train_dgs_fashion_mnist.py
--backend reference).

Modes: ``sync`` (synchronous dense momentum SGD on the mean of the N workers'
gradients: what DDP computes), ``asgd`` (density 1 through the server) and
``dgs`` (density R). Each round every worker takes one step, in a seeded random
order (``--schedule random``) or 0..N-1 (``round-robin``); a worker's gradient
is computed on the parameters of its last pull, so a push is as stale as the
number of other workers' pushes since then (N-1 in round-robin). One epoch is
one pass over the training set by all workers together (each worker its
1/N share, as the DDP example splits it).
"""
import time

import numpy as np
import torch
import torch.nn.functional as F

from gradex.dgs_reference import (Layout, ServerRef, WorkerRef, flat_grads, flat_params,
                                  unflatten_into)


def _shards(n_train, world, batch, seed, epoch):
    order = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed + epoch))
    n = n_train - n_train % (world * batch)
    return [order[:n][k::world] for k in range(world)]


def _grad(model, x, y):
    model.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return float(loss)


class _Async:
    """ASGD / DGS: worker models, their SAMomentum states, one server."""

    def __init__(self, make_model, world, lr, momentum, weight_decay, density, full_sync_every):
        self.models = [make_model() for _ in range(world)]
        params = list(self.models[0].parameters())
        self.layout = Layout([p.numel() for p in params])
        self.server = ServerRef(self.layout, flat_params(params), full_sync_every=full_sync_every)
        self.workers = [WorkerRef(self.layout, lr, momentum, weight_decay, density)
                        for _ in range(world)]
        self.flat = []
        for k, model in enumerate(self.models):
            pull = self.server.join(k)
            self.flat.append(pull.values.clone())
            unflatten_into(self.flat[k], list(model.parameters()))
        self.full_syncs = 0

    def step(self, k, x, y, lr):
        model = self.models[k]
        loss = _grad(model, x, y)
        params = list(model.parameters())
        push = self.workers[k].make_push(flat_grads(params), self.flat[k], lr)
        pull = self.server.push_pull(k, push)
        self.full_syncs += int(pull.full)
        WorkerRef.apply_pull(pull, self.flat[k])
        unflatten_into(self.flat[k], params)
        return loss

    def eval_model(self):
        """Worker 0's model holding the server's M."""
        unflatten_into(self.server.model, list(self.models[0].parameters()))
        return self.models[0]

    def after_eval(self):
        unflatten_into(self.flat[0], list(self.models[0].parameters()))


class _Sync:
    """Synchronous dense momentum SGD on the mean gradient (DDP's math)."""

    def __init__(self, make_model, world, lr, momentum, weight_decay):
        self.model = make_model()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=momentum,
                                   weight_decay=weight_decay)
        self.world = world
        self.acc = None

    def step(self, k, x, y, lr):
        loss = _grad(self.model, x, y)
        g = [p.grad.detach().clone() for p in self.model.parameters()]
        self.acc = g if k == 0 else [a + b for a, b in zip(self.acc, g)]
        if k == self.world - 1:  # the round's last worker: one synchronous step
            for p, a in zip(self.model.parameters(), self.acc):
                p.grad = a / self.world
            for group in self.opt.param_groups:
                group["lr"] = lr
            self.opt.step()
        return loss

    def eval_model(self):
        return self.model

    def after_eval(self):
        pass


def simulate(args, make_model, data, evaluate, on_epoch=None):
    """Trains one mode; returns per-epoch rows. data: (x_train, y_train, x_test, y_test)."""
    x_train, y_train, x_test, y_test = data
    world, batch = args.workers, args.batch_size
    density = 1.0 if args.mode == "asgd" else args.density
    if args.mode == "sync":
        sim = _Sync(make_model, world, args.lr, args.momentum, args.weight_decay)
    else:
        sim = _Async(make_model, world, args.lr, args.momentum, args.weight_decay, density,
                     args.full_sync_every)
    rng = np.random.default_rng(args.seed)
    rows, wall, rounds = [], 0.0, 0
    for epoch in range(1, args.epochs + 1):
        shards = _shards(len(x_train), world, batch, args.seed, epoch)
        lr = args.lr * (args.lr_decay ** (epoch - 1))
        losses = []
        t0 = time.perf_counter()
        for i in range(0, len(shards[0]), batch):
            order = (range(world) if args.schedule == "round-robin" or args.mode == "sync"
                     else rng.permutation(world))
            for k in order:
                idx = shards[k][i:i + batch]
                losses.append(sim.step(int(k), x_train[idx], y_train[idx], lr))
            rounds += 1
            if args.max_rounds and rounds >= args.max_rounds:
                break
        wall += time.perf_counter() - t0
        acc = evaluate(sim.eval_model(), x_test, y_test)
        sim.after_eval()
        row = dict(mode=args.mode, density=density, workers=world, epoch=epoch,
                   steps=rounds * world, wall_s=round(wall, 3),
                   train_loss=round(float(np.mean(losses)), 5), test_acc=round(acc, 5))
        if args.mode != "sync":
            srv = sim.server
            row.update(mean_staleness=round(float(np.mean(srv.staleness)), 3),
                       push_entries_per_step=round(srv.recv_entries / max(1, srv.version), 1),
                       pull_entries_per_step=round(srv.sent_entries / max(1, srv.version), 1),
                       full_syncs=sim.full_syncs)
        rows.append(row)
        if on_epoch:
            on_epoch(row)
        if args.max_rounds and rounds >= args.max_rounds:
            break
    return rows
