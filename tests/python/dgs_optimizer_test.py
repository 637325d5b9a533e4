#!/usr/bin/python3
"""gradex.torch.DGSOptimizer's own plumbing, against gradex.dgs_reference, with
_C.PsWorker replaced by an in-process stand-in that runs the reference (the
C++ path itself is dgs_cpp_reference's and dgs_ps_worker's business): the
per-parameter layout, the flat buffers the parameters become views of, the
gradients gathered in order (a parameter without one pushes zeros), one lr per
step, state_dict, bad arguments, and the error without a PsWorker.
Exit 77 (skipped) without torch."""
import sys
import unittest

try:
    import torch
except ImportError:
    print("dgs_optimizer_test: no torch in this Python; skipped")
    sys.exit(77)

import gradex._C as _C
import gradex.dgs as dgs
import gradex.torch as gx
from gradex.dgs_reference import Layout, ServerRef, WorkerRef


class FakePsWorker:
    """_C.PsWorker's documented surface over the reference; workers of one
    test share `server` (the first to step sets M from its parameters)."""
    server = None
    count = 0

    def __init__(self, layer_sizes, density=0.01, momentum=0.9, weight_decay=5e-4, lr0=0.0,
                 max_staleness=0, use_environment=True, rendezvous_set=None,
                 rendezvous_get=None, **options):
        self.options = dict(options, lr0=lr0, max_staleness=max_staleness)
        self.layout = Layout(layer_sizes)
        self.state = WorkerRef(self.layout, lr0, momentum, weight_decay, density)
        self.k = FakePsWorker.count
        FakePsWorker.count += 1
        self.joined = False
        self.closed = False
        self.steps = 0

    def step(self, grad, params, lr):
        if FakePsWorker.server is None:
            FakePsWorker.server = ServerRef(self.layout, params.clone())
        if not self.joined:
            WorkerRef.apply_pull(FakePsWorker.server.join(self.k), params)
            self.joined = True
        push = self.state.make_push(grad, params, lr)
        WorkerRef.apply_pull(FakePsWorker.server.push_pull(self.k, push), params)
        self.steps += 1

    def stats(self):
        return {"version": FakePsWorker.server.version, "pushes": self.steps}

    def close(self):
        self.closed = True


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


class DGSOptimizerTest(unittest.TestCase):
    def setUp(self):
        self.saved = getattr(_C, "PsWorker", None)
        _C.PsWorker = FakePsWorker
        FakePsWorker.server, FakePsWorker.count = None, 0

    def tearDown(self):
        if self.saved is None:
            del _C.PsWorker
        else:
            _C.PsWorker = self.saved

    def test_two_workers_step_exactly_as_the_reference(self):
        models = [make_model(0), make_model(0)]
        opts = [gx.DGSOptimizer(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4,
                                density=0.25) for m in models]
        self.assertEqual(opts[0].layer_sizes, [15, 3, 6, 2])
        self.assertEqual(opts[0]._worker.options["lr0"], 0.1)
        self.assertEqual(opts[0]._worker.options["max_staleness"], 0)  # None: unbounded
        self.assertEqual(opts[0]._worker.options["timeout_s"], 60.0)
        # The same steps by hand: flat grads in parameter order, the reference.
        layout = Layout([15, 3, 6, 2])
        init = torch.cat([p.detach().reshape(-1) for p in make_model(0).parameters()])
        server = ServerRef(layout, init)
        refs = [WorkerRef(layout, 0.1, 0.9, 5e-4, 0.25) for _ in range(2)]
        flats = [None, None]
        gen = torch.Generator().manual_seed(5)
        for step in range(12):
            k = step % 2
            x = torch.randn(4, 5, generator=gen)
            opts[k].zero_grad()
            models[k](x).square().sum().backward()
            grad = torch.cat([p.grad.reshape(-1) for p in models[k].parameters()])
            opts[k].step()
            if flats[k] is None:
                flats[k] = server.join(k).values.clone()
            push = refs[k].make_push(grad, flats[k], 0.1)
            WorkerRef.apply_pull(server.push_pull(k, push), flats[k])
            got = torch.cat([p.detach().reshape(-1) for p in models[k].parameters()])
            self.assertTrue(torch.equal(got, flats[k]), f"step {step}")
        self.assertEqual(opts[1].stats(), {"version": 12, "pushes": 6})

    def test_parameters_are_views_of_the_flat_buffer(self):
        model = make_model(1)
        opt = gx.DGSOptimizer(model.parameters(), lr=0.1)
        first = next(model.parameters())
        opt._flat[0] = 42.0
        self.assertEqual(float(first.reshape(-1)[0]), 42.0)

    def test_a_parameter_without_a_gradient_pushes_zeros(self):
        model = make_model(2)
        opt = gx.DGSOptimizer(model.parameters(), lr=0.1, density=1.0)
        model[2].bias.grad = None
        for p in list(model.parameters())[:-1]:
            p.grad = torch.ones_like(p)
        opt.step()
        self.assertEqual(opt._grad[-2:].tolist(), [0.0, 0.0])
        self.assertEqual(float(opt._grad[:15].sum()), 15.0)

    def test_one_lr_per_step(self):
        model = make_model(3)
        opt = gx.DGSOptimizer([{"params": model[0].parameters()},
                               {"params": model[2].parameters(), "lr": 0.5}], lr=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        with self.assertRaises(ValueError):
            opt.step()
        opt.param_groups[1]["lr"] = 0.1
        opt.step()

    def test_state_dict_round_trip_and_mismatch(self):
        opt = gx.DGSOptimizer(make_model(4).parameters(), lr=0.1, density=0.01)
        state = opt.state_dict()
        self.assertEqual(state["dgs"]["layer_sizes"], [15, 3, 6, 2])
        other = gx.DGSOptimizer(make_model(4).parameters(), lr=0.1, density=0.01)
        other.load_state_dict(state)
        wrong = gx.DGSOptimizer(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        with self.assertRaises(ValueError):
            wrong.load_state_dict(state)
        with self.assertRaises(ValueError):
            other.load_state_dict({"state": {}, "param_groups": []})

    def test_close_is_idempotent_and_final(self):
        opt = gx.DGSOptimizer(make_model(5).parameters(), lr=0.1)
        worker = opt._worker
        opt.close()
        opt.close()
        self.assertTrue(worker.closed)
        with self.assertRaises(gx.GradexError):
            opt.step()

    def test_bad_arguments(self):
        params = list(make_model(6).parameters())
        for kw in (dict(lr=0), dict(lr=0.1, momentum=0), dict(lr=0.1, momentum=1.5),
                   dict(lr=0.1, density=0), dict(lr=0.1, density=2), dict(lr=0.1, timeout_s=0),
                   dict(lr=0.1, weight_decay=-1), dict(lr=0.1, max_staleness=-1),
                   dict(lr=0.1, max_staleness=0), dict(lr=0.1, max_staleness=2.5)):
            with self.assertRaises(ValueError, msg=str(kw)):
                gx.DGSOptimizer(params, **kw)
        with self.assertRaises(TypeError):
            gx.DGSOptimizer(torch.nn.Linear(2, 2).double().parameters(), lr=0.1)

    def test_without_a_ps_worker_a_clear_error_and_parameters_untouched(self):
        del _C.PsWorker
        try:
            model = make_model(7)
            before = [p.data_ptr() for p in model.parameters()]
            with self.assertRaisesRegex(gx.GradexError, "UNIMPLEMENTED.*PsWorker"):
                gx.DGSOptimizer(model.parameters(), lr=0.1)
            self.assertEqual(before, [p.data_ptr() for p in model.parameters()])
        finally:
            _C.PsWorker = FakePsWorker


if __name__ == "__main__":
    self_check = dgs.DGSOptimizer is gx.DGSOptimizer
    if not self_check:
        sys.exit("gradex.torch.DGSOptimizer is not gradex.dgs.DGSOptimizer")
    unittest.main()
