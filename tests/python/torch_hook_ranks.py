"""The rank processes of tests/python/torch_hook_test.py (its docstring says
what each phase checks): each function runs as one of the phase's rank
processes and prints its findings as one RESULT line for the launcher."""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def emit(**kv):
    print("RESULT " + json.dumps(kv), flush=True)


# ---- rank processes -------------------------------------------------------

class Bucket:
    """What gradex_hook uses of torch.distributed.GradBucket."""

    def __init__(self, index, buffer, params, last):
        self._index, self._buffer, self._params, self._last = index, buffer, params, last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def is_last(self):
        return self._last


def conservation(args, rank, world):
    import torch
    import torch.distributed as dist
    import gradex
    import gradex.torch as gx
    dist.init_process_group("gloo")
    sizes = [700, 1300, 500, 1500]  # four "parameters"
    params = [torch.zeros(n) for n in sizes]
    state = gx.GradexState(algorithm=args.algorithm, density=0.05, timeout_s=30)
    layouts = [[[0, 1], [2, 3]], [[3, 0], [2], [1]]]  # DDP's first layout, then a rebuild
    gen = torch.Generator().manual_seed(100 + rank)
    grad_sum = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    result_sum = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    digest = 0.0
    steps, drain = 40, 80
    for step in range(steps + drain):
        layout = layouts[0] if step < steps // 2 else layouts[1]
        futs = []
        for b, members in enumerate(layout):
            if step < steps:  # small integers: every sum below is exact in float32
                grads = [torch.randint(-8, 9, (sizes[i],), generator=gen).float() for i in members]
            else:
                grads = [torch.zeros(sizes[i]) for i in members]
            for i, g in zip(members, grads):
                grad_sum[i] += g.double()
            buf = torch.cat(grads)
            fut = gx.gradex_hook(state, Bucket(b, buf, [params[i] for i in members],
                                               b == len(layout) - 1))
            futs.append((members, fut))
        for members, fut in futs:
            out = fut.wait()
            off = 0
            for i in members:
                part = out[off:off + sizes[i]].double()
                result_sum[i] += part * world  # the hook returns the mean
                digest += float((part * (1 + torch.arange(sizes[i]) % 7)).sum())
                off += sizes[i]
    stats = state.stats()
    # stats() keeps every layout ever seen; the residuals live in the last one's.
    final = [b for b in stats if [k for k, _ in b["spans"]] in layouts[1]]
    residual = max(b["residual_norm"] for b in final) if len(final) == 3 else float("inf")
    # Conservation needs every rank's gradients: sum them with gloo.
    total = torch.cat(grad_sum)
    dist.all_reduce(total)
    err = float((torch.cat(result_sum) - total).abs().max())
    # NaN on rank 0 (refused by default): rank 0's future fails naming it,
    # every rank's bucket still gets the same finite result.
    nan_buf = torch.full((1500,), float(rank + 1))
    if rank == 0:
        nan_buf[5] = float("nan")
    try:
        gx.gradex_hook(state, Bucket(0, nan_buf, [params[3]], True)).wait()
        nan_error = ""
    except RuntimeError as e:
        nan_error = str(e)
    nan_finite = bool(torch.isfinite(nan_buf).all())
    nan_digest = float((nan_buf * (1 + torch.arange(1500) % 7)).sum())
    # dtype handling
    f64 = torch.full((1500,), 2.0 * (rank + 1), dtype=torch.float64)
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out64 = gx.gradex_hook(state, Bucket(0, f64, [params[3]], True)).wait()
    warned = any("float32" in str(x.message) for x in w)
    try:
        gx.gradex_hook(state, Bucket(0, torch.zeros(1500, dtype=torch.int32), [params[3]], True))
        refused = ""
    except TypeError as e:
        refused = str(e)
    state.flush()
    # The same object twice is a clear error, not a crash.
    state.close()
    try:
        state.stats()
        closed_error = ""
    except gradex.GradexError as e:
        closed_error = str(e)
    emit(rank=rank, residual_max=residual, conservation_max_abs_err=err, digest=digest,
         f64_dtype=str(out64.dtype), f64_warned=warned, int_refused=refused,
         closed_error=closed_error, algorithms=sorted({b["algorithm"] for b in stats}),
         nan_error=nan_error, nan_finite=nan_finite, nan_digest=nan_digest)


def residuals_of(blob):
    """{key: float64 tensor} of a Client::SaveState blob (services/client/saved_state.h)."""
    import struct
    import torch
    if blob[:8] != b"GRDXSTAT":
        raise ValueError("not a gradex state blob")
    (n,) = struct.unpack_from("<Q", blob, 8 + 4 + 8)
    off, out = 8 + 4 + 8 + 8, {}
    for _ in range(n):
        key, elements = struct.unpack_from("<QQ", blob, off)
        off += 16
        out[key] = torch.tensor(struct.unpack_from(f"<{elements}f", blob, off), dtype=torch.float64)
        off += 4 * elements
    return out


def momentum(args, rank, world):
    import torch
    import torch.distributed as dist
    import gradex.torch as gx
    dist.init_process_group("gloo")
    try:
        gx.GradexState(momentum_correction=1.0)
        bad_m = ""
    except ValueError as e:
        bad_m = str(e)
    sizes = [700, 1300, 500]
    params = [torch.zeros(n) for n in sizes]
    m = 0.5
    # pipeline=False: the keyword reaches the client (the sums below are
    # exact either way; ClientPipelineTest compares the two modes bitwise).
    state = gx.GradexState(algorithm=args.algorithm, density=0.05, timeout_s=30,
                           momentum_correction=m, dense_probe_period=0, pipeline=False)
    layouts = [[[0, 1, 2]], [[2, 0], [1]]]  # one bucket, then DDP's rebuild
    gen = torch.Generator().manual_seed(300 + rank)
    ref_u = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    fed = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    result_sum = [torch.zeros(n, dtype=torch.float64) for n in sizes]
    digest, masked, steps = 0.0, 0, 12
    for step in range(steps):
        layout = layouts[0] if step < steps // 2 else layouts[1]
        futs = []
        for b, members in enumerate(layout):
            # Multiples of 2^10 halved at most `steps` times: all on a 2^-2 grid, < 2^20.
            grads = [torch.randint(-8, 9, (sizes[i],), generator=gen).float() * 1024
                     for i in members]
            for i, g in zip(members, grads):
                ref_u[i] = m * ref_u[i] + g.double()
                fed[i] += ref_u[i]
            futs.append((members, gx.gradex_hook(state, Bucket(
                b, torch.cat(grads), [params[i] for i in members], b == len(layout) - 1))))
        for members, fut in futs:
            out = fut.wait().double()
            sparse = 2 * int((out != 0).sum()) < out.numel()
            off = 0
            for i in members:
                part = out[off:off + sizes[i]]
                result_sum[i] += part * world  # the hook returns the mean
                digest += float((part * (1 + torch.arange(sizes[i]) % 7)).sum())
                if sparse:  # factor masking: an applied entry's velocity restarts
                    masked += int((part != 0).sum())
                    ref_u[i][part != 0] = 0
                off += sizes[i]
    state.flush()
    sd = state.state_dict()
    res = residuals_of(sd["client"])
    velocity_same = all(torch.equal(sd["velocity"][i].double(), ref_u[i]) for i in range(3))
    # A checkpoint round trip keeps the velocities (they live in the C++
    # pipeline); the dict's own velocities are the ones restored.
    state.load_state_dict(sd)
    sd2 = state.state_dict()
    zeroed = dict(sd, velocity={k: torch.zeros_like(u) for k, u in sd["velocity"].items()})
    state.load_state_dict(zeroed)
    sd3 = state.state_dict()
    state.load_state_dict(sd)
    velocity_roundtrip = (sorted(sd2["velocity"]) == sorted(sd["velocity"]) and all(
        torch.equal(sd2["velocity"][k], u) and not sd3["velocity"][k].any()
        for k, u in sd["velocity"].items()))
    held = torch.cat([res.get(i, torch.zeros(sizes[i], dtype=torch.float64)) for i in range(3)])
    # Conservation needs every rank's side: sum them with gloo (float64, exact here).
    lhs = torch.cat(fed)
    rhs = torch.cat(result_sum) / world + held  # one rank's share of P * result is result
    diff = lhs - rhs
    dist.all_reduce(diff)
    state.close()
    emit(rank=rank, bad_m=bad_m, conservation_max_abs_err=float(diff.abs().max()),
         velocity_same=velocity_same, velocity_roundtrip=velocity_roundtrip, masked=masked,
         digest=digest,
         fed_norm=float(lhs.norm()))


def train(args, rank, world):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_fashion_mnist as t
    a = t.parse_args(["--algorithm", args.algorithm, "--density", "0.01", "--epochs", "1",
                      "--max-steps", str(args.steps), "--timeout-s", "30"])
    t.init_distributed()
    model, state, rows = t.train(a, rank, world)
    same, _ = t.all_identical(model)
    stats = state.stats()
    emit(rank=rank, test_acc=rows[-1]["test_acc"], identical=same, steps=rows[-1]["steps"],
         calls=sum(b["calls"] for b in stats), dense_calls=sum(b["dense_calls"] for b in stats))
    state.close()
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP+gloo teardown can deadlock (train_fashion_mnist.py)



def handover(args, rank, world):
    """GradexState(optimizer=...) against the hand-written momentum
    correction, bit for bit; close() gives the optimizer back; a checkpoint
    (both state_dicts) resumes a run exactly; Adam and Nesterov say what
    they get."""
    import copy
    import warnings
    import torch
    import torch.distributed as dist
    import gradex.torch as gx
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    steps, lr, m, wd = 12, 0.05, 0.9, 0.01
    gen = torch.Generator().manual_seed(700 + rank)
    data = [(torch.randn(16, 32, generator=gen), torch.randint(0, 10, (16,), generator=gen))
            for _ in range(steps)]
    common = dict(algorithm=args.algorithm, density=0.05, timeout_s=30)

    def net(start=None):
        torch.manual_seed(5)  # the same start on every rank and in every run
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
        if start is not None:
            with torch.no_grad():
                for p, q in zip(model.parameters(), start):
                    p.copy_(q)
        return model

    def one_param(start=None):
        torch.manual_seed(6)
        model = torch.nn.Sequential(torch.nn.Linear(32, 10, bias=False))
        if start is not None:
            with torch.no_grad():
                model[0].weight.copy_(start[0])
        return model

    def train(ddp, opt, batches):
        for x, y in batches:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()

    def params(model):
        return [p.detach().clone() for p in model.parameters()]

    def bits_equal(a, b):
        return len(a) == len(b) and all(torch.equal(_bits(x), _bits(y)) for x, y in zip(a, b))

    def run(make_opt, state_kw, batches=data, decay_by_hand=0.0):
        """(final parameters, state_dict, handover line, optimizer, momentum
        of the optimizer while handed over) of a fresh model and state."""
        model = net()
        if decay_by_hand:  # what the hand-over's weight decay must equal
            for p in model.parameters():
                p.register_hook(lambda g, p=p: g.add(p.detach(), alpha=decay_by_hand))
        ddp = DDP(model)
        opt = make_opt(ddp.parameters())
        state = gx.GradexState(model=model, **common, **state_kw(opt))
        ddp.register_comm_hook(state, gx.gradex_hook)
        during = [(g["momentum"], g["weight_decay"]) for g in opt.param_groups]
        train(ddp, opt, batches)
        state.flush()
        sd = state.state_dict()
        line = state.handover
        state.close()
        return params(model), sd, line, opt, during

    sgd = lambda mom, decay=0.0, nesterov=False: (  # noqa: E731
        lambda ps: torch.optim.SGD(ps, lr=lr, momentum=mom, weight_decay=decay, nesterov=nesterov))
    out = {"rank": rank}
    # 1. Handed over vs. the README's hand-written form (momentum 0 in the
    # optimizer, momentum_correction=m, no dense probes).
    a, sda, line, opt_a, during = run(sgd(m), lambda o: dict(optimizer=o))
    b, sdb, _, _, _ = run(sgd(0), lambda o: dict(momentum_correction=m, dense_probe_period=0))
    out["line"] = line
    out["exact"] = bits_equal(a, b)
    out["velocity_exact"] = (sorted(sda["velocity"]) == sorted(sdb["velocity"]) and all(
        torch.equal(_bits(u), _bits(sdb["velocity"][k])) for k, u in sda["velocity"].items()))
    out["moved"] = not bits_equal(a, params(net()))
    out["during"] = during
    out["restored"] = [(g["momentum"], g["weight_decay"]) for g in opt_a.param_groups]
    # 2. Weight decay moves with the momentum: the same as adding wd * w to
    # each gradient by hand before the hook.
    a, _, line_wd, opt_a, during = run(sgd(m, wd), lambda o: dict(optimizer=o))
    b, _, _, _, _ = run(sgd(0), lambda o: dict(momentum_correction=m, dense_probe_period=0),
                        decay_by_hand=wd)
    out["decay_exact"] = bits_equal(a, b)
    out["decay_line"] = line_wd
    out["decay_during"] = during
    out["decay_restored"] = [(g["momentum"], g["weight_decay"]) for g in opt_a.param_groups]
    # 3. Checkpoint: half the run, both state_dicts saved, the other half;
    # then a fresh model, optimizer (as built) and state resume from them.
    # One parameter: a fresh DDP's first step uses DDP's initial bucket
    # layout, not the rebuilt one the saved run had reached, and a bucket of
    # several parameters in another order is another sparse selection.
    half = steps // 2
    net = lambda start=None: one_param(start)  # noqa: E731
    model = net()
    ddp = DDP(model)
    opt = sgd(m)(ddp.parameters())
    state = gx.GradexState(model=model, optimizer=opt, **common)
    ddp.register_comm_hook(state, gx.gradex_hook)
    train(ddp, opt, data[:half])
    state.flush()
    saved = (params(model), copy.deepcopy(opt.state_dict()), state.state_dict())
    train(ddp, opt, data[half:])
    whole = params(model)
    state.close()
    model = net(saved[0])
    ddp = DDP(model)
    opt = sgd(m)(ddp.parameters())
    state = gx.GradexState(model=model, optimizer=opt, **common)
    ddp.register_comm_hook(state, gx.gradex_hook)
    opt.load_state_dict(saved[1])
    state.load_state_dict(saved[2])
    train(ddp, opt, data[half:])
    out["resumed_exact"] = bits_equal(params(model), whole)
    out["resumed_momentum"] = opt.param_groups[0]["momentum"]
    state.close()
    out["closed_momentum"] = opt.param_groups[0]["momentum"]
    # Without the hand-over the checkpoint is refused, naming the fix.
    state = gx.GradexState(momentum_correction=m, **common)
    try:
        state.load_state_dict(saved[2])
        out["mismatch_error"] = ""
    except ValueError as e:
        out["mismatch_error"] = str(e)
    # Every rank has joined before rank 0 (the embedded coordinator) leaves:
    # a state that never trains otherwise races the other rank's join.
    dist.barrier()
    state.close()
    # 4. Adam keeps its settings and says (a warning on rank 0) what it gets.
    model = net()
    ddp = DDP(model)
    adam = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    before = copy.deepcopy([{k: v for k, v in g.items() if k != "params"}
                            for g in adam.param_groups])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        state = gx.GradexState(optimizer=adam, **common)
    out["adam_warnings"] = [str(x.message) for x in w if "gradex" in str(x.message)]
    out["adam_line"] = state.handover
    out["adam_mc"] = state.momentum_correction
    ddp.register_comm_hook(state, gx.gradex_hook)
    train(ddp, adam, data[:3])
    out["adam_unchanged"] = before == [{k: v for k, v in g.items() if k != "params"}
                                       for g in adam.param_groups]
    state.close()
    # 5. Nesterov: handed over as plain momentum correction, and says so.
    opt = sgd(m, nesterov=True)(net().parameters())
    state = gx.GradexState(optimizer=opt, **common)
    out["nesterov_line"] = state.handover
    out["nesterov_mc"] = state.momentum_correction
    dist.barrier()  # as above
    state.close()
    try:
        gx.GradexState(optimizer=sgd(m)(net().parameters()), momentum_correction=m, **common)
        out["both_error"] = ""
    except ValueError as e:
        out["both_error"] = str(e)
    emit(**out)
    sys.stdout.flush()
    os._exit(0)  # torch 1.13's DDP+gloo teardown can deadlock (train_fashion_mnist.py)


def dead_rank(args, rank, world):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import train_fashion_mnist as t
    import gradex.torch as gx
    from torch.nn.parallel import DistributedDataParallel as DDP
    t.init_distributed()
    torch.set_num_threads(1)
    timeout_s = 8.0
    a = t.parse_args([])
    model = DDP(t.make_model(a))
    state = gx.GradexState(algorithm=args.algorithm, density=0.01, timeout_s=timeout_s)
    model.register_comm_hook(state, gx.gradex_hook)
    x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
    for step in range(20):
        if rank == 1 and step == 10:
            os._exit(5)  # dies mid-training without leaving the job
        t0 = time.monotonic()
        try:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
        except Exception as e:  # DDP re-raises the future's error as RuntimeError
            emit(rank=rank, step=step, error=str(e), error_s=time.monotonic() - t0,
                 timeout_s=timeout_s)
            os._exit(0)  # the state is broken; a trainer exits so torchrun restarts it
    emit(rank=rank, step=20, error="", error_s=0, timeout_s=timeout_s)


def bad_join(args, rank, world):
    import gradex
    import gradex.torch as gx
    timeout_s = 5.0
    t0 = time.monotonic()
    try:
        if args.target == "none":  # no coordinator, no process group: rank 1 cannot find rank 0
            gx.GradexState(algorithm="spardl", timeout_s=timeout_s).close()
        elif args.target.startswith("plan"):  # plan[-allowed]:HOST:PORT, the job runs spardl
            how, target = args.target.split(":", 1)
            gx.GradexState(algorithm="oktopk", coordinator=target, token="the-token-of-this-test",
                           timeout_s=timeout_s, allow_plan_override=how == "plan-allowed").close()
        else:
            gx.GradexState(algorithm="spardl", coordinator=args.target, token="not-the-token",
                           timeout_s=timeout_s).close()
        error = ""
    except gradex.GradexError as e:
        error = str(e)
    emit(rank=rank, error=error, error_s=time.monotonic() - t0, timeout_s=timeout_s)


# ---- cuda: the device path against the host path, bit for bit -------------

# The SparDL family's local part runs on the GPU (DeviceLocalPart() in
# collectives/, and its residual does not decay): its CUDA buckets' sparse
# steps must report "device selection". Another algorithm's may report that
# or "whole-bucket staging" (which ones have a device local part is the
# catalog's business), never "host".
_DEVICE_SELECTING = ("spardl", "spardl-rsag", "spardl-bsag")
# Dense probes at steps 4 and 9 of 12: two dense samples, under the bucket
# controller's three, so no run switches a bucket to dense on its timings
# (both runs must choose the same algorithms to be comparable). A probe runs
# beside the sparse exchange; the dense steps are start_iter's.
_PROBE_PERIOD = 5
_START_ITER = 2


def _bits(t):
    import torch
    return t.detach().cpu().contiguous().view(torch.int32)


def _device(args, rank):
    import torch
    if args.cuda_device == "cpu":
        return torch.device("cpu")
    index = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def _layout_stats(state):
    return {tuple(tuple(s) for s in e["spans"]): e for e in state.stats()}


def _elements(key):
    return sum(n for _, n in key)


def _standin_run(gx, args, rank, dev, values, steps=12):
    """One sequence of bucket-stand-in steps on `dev` with a fresh state:
    per step the results (CPU copies) and per bucket (device_path, dense,
    algorithm, bytes down, bytes up); then the state blob."""
    import torch
    sizes = [700, 1300, 500, 1500]
    params = [torch.zeros(n) for n in sizes]
    layouts = [[[0, 1], [2, 3]], [[3, 0], [2], [1]]]  # DDP's first layout, then a rebuild
    state = gx.GradexState(algorithm=args.algorithm, density=0.05, timeout_s=30,
                           momentum_correction=0.5, dense_probe_period=_PROBE_PERIOD,
                           start_iter=_START_ITER)
    gen = torch.Generator().manual_seed(700 + rank)  # the same values on both devices
    results, paths, on_device, dense_seen = [], [], True, {}
    # "side-stream": each CUDA bucket is written on a stream of its own,
    # behind a kernel that sleeps ~10 ms, and handed over from that stream
    # (gradex_hook must wait for it: gradex's stream follows the default one).
    side = torch.cuda.Stream(dev) if values == "side-stream" and dev.type == "cuda" else None
    for step in range(steps):
        layout = layouts[0] if step < steps // 2 else layouts[1]
        futs = []
        for b, members in enumerate(layout):
            n = sum(sizes[i] for i in members)
            if values != "gaussian":  # every sum and halving exact (momentum phase)
                g = torch.randint(-8, 9, (n,), generator=gen).float() * 1024
            else:  # rounding everywhere: fused or reordered arithmetic would show
                g = torch.randn(n, generator=gen)
            bucket = Bucket(b, g.to(dev), [params[i] for i in members], b == len(layout) - 1)
            if side is None:
                futs.append(gx.gradex_hook(state, bucket))
                continue
            torch.cuda.synchronize(dev)
            with torch.cuda.stream(side):
                src = bucket._buffer
                src.record_stream(side)
                bucket._buffer = torch.zeros(n, device=dev)
                torch.cuda._sleep(20_000_000)
                bucket._buffer.copy_(src)
                futs.append(gx.gradex_hook(state, bucket))
        outs = [f.wait() for f in futs]
        on_device = on_device and all(o.device == dev for o in outs)
        results.append([o.cpu().clone() for o in outs])
        stats = _layout_stats(state)
        row = []
        for members in layout:
            key = tuple((i, sizes[i]) for i in members)
            e = stats[key]
            dense = e["dense_calls"] > dense_seen.get(key, 0)
            dense_seen[key] = e["dense_calls"]
            row.append([e["device_path"], dense, e["algorithm"], e["device_to_host_bytes"],
                        e["host_to_device_bytes"], _elements(key)])
        paths.append(row)
    state.flush()
    blob = state.state_dict()["client"]
    state.close()
    return results, paths, blob, on_device


def _state_maps(blob):
    """(residuals, velocities) of a version-2 state blob, {key: float32 tensor}."""
    import struct
    import torch
    off, maps = 8 + 4 + 8, []
    for _ in range(2):
        (count,) = struct.unpack_from("<Q", blob, off)
        off += 8
        m = {}
        for _ in range(count):
            key, elements = struct.unpack_from("<QQ", blob, off)
            off += 16
            m[key] = torch.frombuffer(bytearray(blob[off:off + 4 * elements]), dtype=torch.float32)
            off += 4 * elements
        maps.append(m)
    return maps


def _compare_blobs(a, b):
    """'' when the blobs are equal byte for byte, else where they differ."""
    if a == b:
        return ""
    out = []
    for what, ma, mb in zip(("residual", "velocity"), _state_maps(a), _state_maps(b)):
        if sorted(ma) != sorted(mb):
            out.append(f"{what} keys {sorted(ma)} vs {sorted(mb)}")
            continue
        for k in ma:
            d = int((_bits(ma[k]) != _bits(mb[k])).sum())
            if d:
                out.append(f"{what} of span {k}: {d} of {ma[k].numel()} entries differ")
    return "; ".join(out) or "the blobs' headers differ"


def _expected_paths(args, paths, device_run, momentum=True):
    """Per step and bucket, the device_path the bucket pipeline's Select must
    report: 'host' for CPU buckets; for CUDA buckets of a device-selecting
    algorithm 'device selection', except a span's first step with momentum
    (u = g is seeded on the host) and dense steps (probes), which stage the
    bucket whole; other algorithms' sparse steps either device path."""
    exp = []
    for step, row in enumerate(paths):
        r = []
        for path, dense, *_ in row:
            if not device_run:
                r.append(("host",))
            elif dense or (momentum and step == 0):
                r.append(("whole-bucket staging",))
            elif args.algorithm in _DEVICE_SELECTING:
                r.append(("device selection",))
            else:
                r.append(("device selection", "whole-bucket staging"))
        exp.append(r)
    return exp


def _path_report(args, paths, device_run, momentum=True):
    """(mismatches as text, count of device selections)."""
    exp = _expected_paths(args, paths, device_run, momentum)
    bad = []
    for step, (row, erow) in enumerate(zip(paths, exp)):
        for b, (got, want) in enumerate(zip(row, erow)):
            if got[0] not in want:
                bad.append(f"step {step} bucket {b} ({got[2]}{', dense' if got[1] else ''}): "
                           f"{got[0]!r}, expected {' or '.join(map(repr, want))}")
    selected = sum(1 for row in paths for p in row if p[0] == "device selection")
    return bad, selected


def _ddp_run(gx, args, rank, dev, dtype, steps=8):
    """A real DDP run of one Linear layer on `dev` in `dtype` with a fresh
    state: loss = sum(model(x) * c) over integer x and c, so each step's
    gradients (c^T x, sum c) are integers, the same on any device; with
    momentum 0.5, lr 2^-4 and a few steps every velocity, result and update
    stays exact in float32 (the float64 run checks that). Returns the final
    parameters (CPU copies), per-step paths and the state blob."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    g0 = torch.Generator().manual_seed(900)  # the same start on every rank and device
    model = torch.nn.Linear(48, 24)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g0).float())
    start = [p.detach().clone() for p in model.parameters()]
    model = model.to(device=dev, dtype=dtype)
    # A tiny bucket cap: after DDP's rebuild the weight and the bias travel
    # in buckets of their own (a layout change through the real reducer).
    ddp = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None,
              bucket_cap_mb=0.001)
    state = gx.GradexState(algorithm=args.algorithm, density=0.05, timeout_s=30,
                           momentum_correction=0.5, dense_probe_period=_PROBE_PERIOD,
                           model=model)
    ddp.register_comm_hook(state, gx.gradex_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=2.0 ** -4)
    gen = torch.Generator().manual_seed(1000 + rank)
    paths, dense_seen = [], {}
    for step in range(steps):
        x = torch.randint(-3, 4, (16, 48), generator=gen).to(device=dev, dtype=dtype)
        c = torch.randint(-3, 4, (16, 24), generator=gen).to(device=dev, dtype=dtype)
        opt.zero_grad()
        (ddp(x) * c).sum().backward()
        opt.step()
        state.flush()
        row = []
        for key, e in _layout_stats(state).items():
            if e["calls"] > dense_seen.get(("calls", key), 0):  # its bucket ran this step
                dense = e["dense_calls"] > dense_seen.get(key, 0)
                row.append([e["device_path"], dense, e["algorithm"], e["device_to_host_bytes"],
                            e["host_to_device_bytes"], _elements(key)])
            dense_seen[("calls", key)] = e["calls"]
            dense_seen[key] = e["dense_calls"]
        paths.append(row)
    blob = state.state_dict()["client"]
    layouts = len(state.stats())
    state.close()
    params = [p.detach().cpu().clone() for p in model.parameters()]
    moved = any(not torch.equal(a.double(), b.double()) for a, b in zip(start, params))
    return params, paths, blob, layouts, moved


def cuda(args, rank, world):
    import torch
    import torch.distributed as dist
    import gradex.torch as gx
    dist.init_process_group("gloo")
    dev = _device(args, rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = dict(rank=rank, device=str(dev), algorithm=args.algorithm)
    if dev.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(dev)
    out["torch"] = torch.__version__
    host = torch.device("cpu")
    for values in ("integers", "gaussian") + (("side-stream",) if dev.type == "cuda" else ()):
        r_host, p_host, b_host, _ = _standin_run(gx, args, rank, host, values)
        r_dev, p_dev, b_dev, on_dev = _standin_run(gx, args, rank, dev, values)
        differ = [f"step {s} bucket {b}: {int((_bits(x) != _bits(y)).sum())} of {x.numel()}"
                  for s, (hs, ds) in enumerate(zip(r_host, r_dev))
                  for b, (x, y) in enumerate(zip(hs, ds)) if not torch.equal(_bits(x), _bits(y))]
        bad_host, _ = _path_report(args, p_host, False)
        bad_dev, selected = _path_report(args, p_dev, dev.type == "cuda")
        digest = float(sum(float((x.double() * (1 + torch.arange(x.numel()) % 7)).sum())
                           for row in r_dev for x in row))
        _, velocities = _state_maps(b_dev)
        out[values] = dict(
            steps=len(r_host), results_differ=differ[:5], n_results_differ=len(differ),
            state_differ=_compare_blobs(b_host, b_dev), host_paths_bad=bad_host[:5],
            device_paths_bad=bad_dev[:5], n_device_paths_bad=len(bad_dev),
            device_selected=selected, on_device=on_dev, digest=digest,
            velocity_nonzero=sum(int((u != 0).sum()) for u in velocities.values()),
            dense_steps=sum(1 for row in p_dev if any(p[1] for p in row)),
            device_paths=[[p[0] for p in row] for row in p_dev],
            bytes_down_up=[[p[3:6] for p in row] for row in p_dev])
    # Real DDP: CPU float32, the device float32, and CPU float64 (exactness).
    p32, q_host, b32, layouts, moved = _ddp_run(gx, args, rank, host, torch.float32)
    pdev, q_dev, bdev, _, _ = _ddp_run(gx, args, rank, dev, torch.float32)
    p64, _, _, _, _ = _ddp_run(gx, args, rank, host, torch.float64)
    bad_dev, selected = _path_report(args, q_dev, dev.type == "cuda")
    bad_host, _ = _path_report(args, q_host, False)
    out["ddp"] = dict(
        params_equal=all(torch.equal(_bits(a), _bits(b)) for a, b in zip(p32, pdev)),
        exact=all(torch.equal(a.double(), b) for a, b in zip(p32, p64)),
        moved=moved,
        state_differ=_compare_blobs(b32, bdev), layouts=layouts,
        host_paths_bad=bad_host[:5], device_paths_bad=bad_dev[:5], device_selected=selected,
        digest=float(sum(float(p.double().sum()) for p in pdev)),
        device_paths=[[p[0] for p in row] for row in q_dev])
    emit(**out)
