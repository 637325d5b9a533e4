#!/usr/bin/python3
"""gradex.dgs_reference, the exact DGS/ASGD oracle, checked on integer-valued
data where float32 arithmetic is exact: SAMomentum's bookkeeping, the server's
conservation (M - v_k holds every unsent entry; a worker's parameters are v_k),
density 1 equal to plain ASGD step for step, full syncs, staleness.
Exit 77 (skipped) without torch."""
import random
import sys
import unittest

try:
    import torch
except ImportError:
    print("dgs_reference_test: no torch in this Python; skipped")
    sys.exit(77)

from gradex.dgs_reference import (Layout, ServerRef, WorkerRef, select_count, step_ratio,
                                  top_indices)


def int_tensor(rng, n, lo=-3, hi=3):
    return torch.tensor([float(rng.randint(lo, hi)) for _ in range(n)], dtype=torch.float32)


class SelectionTest(unittest.TestCase):
    def test_top_indices_equals_a_stable_sort_with_ties(self):
        rng = random.Random(1)
        for _ in range(500):
            n = rng.randint(1, 40)
            x = int_tensor(rng, n, -4, 4)
            k = rng.randint(1, n)
            order = torch.sort(x.abs(), descending=True, stable=True).indices[:k]
            want = torch.sort(order[x[order] != 0]).values
            self.assertTrue(torch.equal(top_indices(x, k), want), (x, k))

    def test_ratio_and_count(self):
        self.assertAlmostEqual(step_ratio(0.01, 0.05, 0.1), 0.005, places=9)
        self.assertEqual(step_ratio(0.125, 0.25, 0.5), 0.0625)
        # density, lr and lr0 are floats on the C++ side: 0.1f is just above
        # 0.1, so a layer of 10 keeps ceil(1.0000000149) = 2, as C++ does.
        self.assertEqual(select_count(10, step_ratio(0.1, 1.0, 1.0)), 2)
        self.assertAlmostEqual(step_ratio(0.01, 1.0, 0.1), 0.1, places=7)
        self.assertEqual(step_ratio(0.5, 10.0, 0.1), 1.0)  # capped
        self.assertEqual(step_ratio(1.0, 0.001, 0.1), 1.0)  # density 1 is dense at any lr
        self.assertEqual(select_count(1000, 0.005), 5)
        self.assertEqual(select_count(1000, 0.0051), 6)
        self.assertEqual(select_count(10, 1e-9), 1)
        self.assertEqual(select_count(10, 1.0), 10)

    def test_layout_selects_per_layer(self):
        layout = Layout([4, 6])
        x = torch.tensor([9, 1, 2, 3, 0.5, 0.25, 8, 7, 6, 5], dtype=torch.float32)
        self.assertEqual(layout.select(x, 0.5).tolist(), [0, 3, 6, 7, 8])
        with self.assertRaises(ValueError):
            Layout([3, 0])


class WorkerTest(unittest.TestCase):
    def test_samomentum_sends_the_top_and_divides_the_rest_by_m(self):
        rng = random.Random(2)
        layout = Layout([10, 30])
        w = WorkerRef(layout, lr0=1.0, momentum=0.5, weight_decay=0.0, density=0.125)
        params = int_tensor(rng, layout.total)
        for _ in range(20):
            g = int_tensor(rng, layout.total)
            pre = 0.5 * w.u + 1.0 * g
            push = w.make_push(g, params, 1.0)
            nz = [int(torch.count_nonzero(pre[:10])), int(torch.count_nonzero(pre[10:]))]
            self.assertEqual(push.indices.numel(), min(2, nz[0]) + min(4, nz[1]))
            self.assertTrue(torch.all(push.values != 0))
            self.assertTrue(torch.equal(push.values, pre[push.indices]))
            sent = torch.zeros(layout.total, dtype=torch.bool)
            sent[push.indices] = True
            self.assertTrue(torch.equal(w.u[sent], pre[sent]))
            self.assertTrue(torch.equal(w.u[~sent], pre[~sent] * 2))

    def test_weight_decay_and_lr_enter_as_lr_times_g_plus_wd_w(self):
        layout = Layout([4])
        w = WorkerRef(layout, lr0=0.5, momentum=0.5, weight_decay=0.25, density=1.0)
        params = torch.tensor([4.0, -8.0, 0.0, 2.0])
        g = torch.tensor([1.0, 2.0, -3.0, 0.0])
        push = w.make_push(g, params, 0.5)  # dense: every nonzero, zeros never sent
        self.assertEqual(push.indices.tolist(), [0, 2, 3])
        self.assertEqual(push.values.tolist(), [1.0, -1.5, 0.25])
        push = w.make_push(g, params, 0.5)
        self.assertEqual(push.values.tolist(), [1.5, -2.25, 0.375])

    def test_bad_options_are_refused(self):
        for kw in (dict(density=0.0), dict(density=1.5), dict(momentum=0.0), dict(lr0=0.0)):
            with self.assertRaises(ValueError):
                WorkerRef(Layout([3]), **{"lr0": 1.0, **kw})


def run_async(density, rounds, workers=3, sizes=(12, 20), full_sync_every=150, seed=3,
              check=None):
    """Workers in a seeded random order each round; gradients are integers that
    depend on the worker's parameters (so staleness matters). Returns the server,
    the workers' parameters, and the params after each push (per worker)."""
    rng = random.Random(seed)
    layout = Layout(list(sizes))
    init = int_tensor(rng, layout.total, -5, 5)
    server = ServerRef(layout, init, full_sync_every=full_sync_every)
    states = [WorkerRef(layout, 1.0, 0.5, 0.0, density) for _ in range(workers)]
    params = [server.join(k).values.clone() for k in range(workers)]
    trace = []
    for _ in range(rounds):
        order = list(range(workers))
        rng.shuffle(order)
        for k in order:
            g = torch.remainder(params[k] * (k + 2), 7) - 3
            push = states[k].make_push(g, params[k], 1.0)
            v_before = server.peers[k].v.clone()
            m_before = server.model.clone()
            pull = server.push_pull(k, push)
            WorkerRef.apply_pull(pull, params[k])
            if check:
                check(server, k, push, pull, v_before, m_before, params[k])
            trace.append((k, params[k].clone()))
    return server, params, trace


class ServerTest(unittest.TestCase):
    def test_conservation_every_unsent_entry_stays_in_m_minus_v(self):
        pulls = {"sparse": 0, "full": 0}

        def check(server, k, push, pull, v_before, m_before, params):
            m = m_before.clone()
            m[push.indices] -= push.values
            self.assertTrue(torch.equal(server.model, m))  # the push, all of it, in M
            v = server.peers[k].v
            self.assertTrue(torch.equal(params, v))  # the worker holds exactly v_k
            if pull.full:
                pulls["full"] += 1
                self.assertTrue(torch.equal(v, server.model))
                return
            pulls["sparse"] += 1
            diff_before = server.model - v_before
            sent = torch.zeros_like(v, dtype=torch.bool)
            sent[pull.indices] = True
            self.assertTrue(torch.equal(pull.values, diff_before[pull.indices]))
            left = server.model - v
            self.assertTrue(torch.equal(left[~sent], diff_before[~sent]))  # nothing lost
            self.assertTrue(torch.all(left[sent] == 0))
            nz = [int(torch.count_nonzero(diff_before[:12])), int(torch.count_nonzero(diff_before[12:]))]
            # ceil(0.125*12) + ceil(0.125*20), nonzeros only
            self.assertEqual(pull.indices.numel(), min(2, nz[0]) + min(3, nz[1]))

        run_async(0.125, rounds=30, full_sync_every=25, check=check)
        self.assertGreater(pulls["full"], 0)
        self.assertGreater(pulls["sparse"], pulls["full"])

    def test_density_1_equals_plain_asgd_step_for_step(self):
        server, params, trace = run_async(1.0, rounds=12, full_sync_every=10**9)
        # Plain ASGD, written independently: local momentum, dense push, the
        # worker takes the server's model after its push. Integers and m = 0.5
        # over 12 steps stay exact in float32 (checked against float64 too).
        for dtype in (torch.float32, torch.float64):
            rng = random.Random(3)
            init = int_tensor(rng, 32, -5, 5).to(dtype)
            model = init.clone()
            u = [torch.zeros(32, dtype=dtype) for _ in range(3)]
            p = [init.clone() for _ in range(3)]
            steps = iter(trace)
            for _ in range(12):
                order = list(range(3))
                rng.shuffle(order)
                for k in order:
                    g = torch.remainder(p[k] * (k + 2), 7) - 3
                    u[k] = 0.5 * u[k] + g
                    model = model - u[k]
                    p[k] = model.clone()
                    tk, tp = next(steps)
                    self.assertEqual(tk, k)
                    self.assertTrue(torch.equal(tp.to(dtype), p[k]), f"{dtype} worker {k}")

    def test_full_sync_every_n_versions_and_on_join(self):
        server, _, _ = run_async(0.125, rounds=1, workers=2, full_sync_every=150)
        self.assertEqual(server.version, 2)
        fulls = []
        run_async(0.125, rounds=10, workers=2, full_sync_every=4,
                  check=lambda s, k, *_a: fulls.append((s.version, k)) if _a[1].full else None)
        # Each worker's full syncs are >= 4 versions apart, and each gets them.
        for k in (0, 1):
            versions = [v for v, w in fulls if w == k]
            self.assertGreaterEqual(len(versions), 3)
            self.assertTrue(all(b - a >= 4 for a, b in zip(versions, versions[1:])))
        pull = server.join(0)  # a re-join is a full sync, v_0 = M
        self.assertTrue(pull.full and torch.equal(server.peers[0].v, server.model))

    def test_staleness_and_its_bound(self):
        layout = Layout([4])
        server = ServerRef(layout, torch.zeros(4), max_staleness=1)
        w = WorkerRef(layout, 1.0, 0.5, 0.0, 1.0)
        for k in range(3):
            server.join(k)
        g = torch.ones(4)
        server.push_pull(0, w.make_push(g, torch.zeros(4), 1.0))
        server.push_pull(1, w.make_push(g, torch.zeros(4), 1.0))
        self.assertEqual(server.staleness, [0, 1])
        self.assertEqual(server.staleness_of(2), 2)
        with self.assertRaises(ValueError):
            server.push_pull(2, w.make_push(g, torch.zeros(4), 1.0))
        self.assertEqual(server.version, 2)  # refused, never applied
        with self.assertRaises(KeyError):
            server.push_pull(7, w.make_push(g, torch.zeros(4), 1.0))


if __name__ == "__main__":
    unittest.main()
