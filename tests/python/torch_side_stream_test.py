#!/usr/bin/python3
"""gradex_hook's copy back of a converted (bf16, fp16) bucket handed over from
a side stream (ctest torch_side_stream; scripts/gpu-check runs --phase cuda).

gradex hands a side-stream bucket's float32 result back to that stream only;
the copy into the bucket's own dtype must run ordered after it. Phases:

  order   (any machine) gradex.torch._copy_result with a stand-in torch.cuda:
          on a side stream the copy is issued while that stream is current, an
          event is recorded on it after the copy and the host waits for that
          event (not for the whole stream) before returning; without a side
          stream the copy is a plain one on the thread's current stream (the
          legacy default stream, where gradex hands back to) and nothing waits.
  cuda    (a GPU) 2 ranks (gloo): bf16 and fp16 buckets of small integers,
          each written on a side stream behind a kernel that sleeps ~20 ms and
          handed over from it, 8 steps and a dense probe every 3; the same
          sequence with CPU tensors: every step's results bitwise equal, in the
          bucket's dtype, on the bucket's device, and results identical on
          both ranks. Exit 77 where torch sees no GPU; --cuda-device cpu runs
          it CPU against CPU (the plumbing, on any machine; ctest does).

--phase all (ctest) runs order, then cuda where there is a GPU.
Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77
SIZES = [700, 1300, 500, 1500]
STEPS = 8


def check(cond, what, failures):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


class _FakeCuda:
    """torch.cuda's stream(), Event() as _copy_result uses them, logging."""

    def __init__(self):
        self.current, self.log = "default", []

    @contextlib.contextmanager
    def stream(self, s):
        prev, self.current = self.current, s
        self.log.append(("enter", s))
        try:
            yield
        finally:
            self.current = prev
            self.log.append(("exit", s))

    def Event(self):  # noqa: N802 (torch's name)
        cuda = self

        class Event:
            def record(self, s):
                cuda.log.append(("record", s, cuda.current))

            def synchronize(self):
                cuda.log.append(("event-synchronize", cuda.current))

        return Event()


class _FakeTensor:
    def __init__(self, cuda):
        self.cuda = cuda

    def copy_(self, src):
        self.cuda.log.append(("copy", self.cuda.current))


def phase_order(failures):
    import gradex.torch as gx
    cuda = _FakeCuda()
    gx._copy_result(_FakeTensor(cuda), object(), "side", cuda=cuda)
    want = [("enter", "side"), ("copy", "side"), ("record", "side", "side"), ("exit", "side"),
            ("event-synchronize", "default")]
    check(cuda.log == want, f"order: on a side stream the copy runs on it, an event after it is "
          f"waited for ({cuda.log})", failures)
    cuda = _FakeCuda()
    gx._copy_result(_FakeTensor(cuda), object(), None, cuda=cuda)
    check(cuda.log == [("copy", "default")],
          f"order: without a side stream a plain copy on the current stream, no wait ({cuda.log})",
          failures)


def rank_main(rank, device):
    import torch
    import torch.distributed as dist
    import gradex.torch as gx
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_hook_ranks import Bucket
    dist.init_process_group("gloo")
    if device == "cuda":
        index = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
        torch.cuda.set_device(index)
        dev = torch.device("cuda", index)
    else:  # the plumbing on any machine: CPU against CPU, no side stream
        dev = torch.device("cpu")
    params = [torch.zeros(n) for n in SIZES]
    layout = [[0, 1], [2, 3]]
    out = dict(rank=rank, torch=torch.__version__,
               gpu=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "no GPU")
    for dtype in (torch.bfloat16, torch.float16):
        runs = []
        for where in ("cpu", "cuda"):
            state = gx.GradexState(algorithm="spardl", density=0.05, timeout_s=30,
                                   dense_probe_period=3)
            gen = torch.Generator().manual_seed(900 + rank)  # the same values on both devices
            side = torch.cuda.Stream(dev) if where == "cuda" and dev.type == "cuda" else None
            results, dtypes, devices = [], set(), set()
            for step in range(STEPS):
                futs = []
                for b, members in enumerate(layout):
                    n = sum(SIZES[i] for i in members)
                    g = torch.randint(-8, 9, (n,), generator=gen).to(dtype)
                    bucket = Bucket(b, g, [params[i] for i in members], b == len(layout) - 1)
                    if side is None:
                        futs.append(gx.gradex_hook(state, bucket))
                        continue
                    torch.cuda.synchronize(dev)
                    with torch.cuda.stream(side):
                        # Written on the side stream behind a sleeping kernel:
                        # the hook's bucket is not ready when it is handed over.
                        buf = torch.zeros(n, dtype=dtype, device=dev)
                        torch.cuda._sleep(20_000_000)
                        buf.copy_(g.to(dev, non_blocking=False))
                        bucket._buffer = buf
                        futs.append(gx.gradex_hook(state, bucket))
                outs = [f.wait() for f in futs]
                dtypes.update(str(o.dtype) for o in outs)
                devices.update(str(o.device) for o in outs)
                results.append([o.cpu().clone() for o in outs])
            state.close()
            runs.append((results, dtypes, devices))
        (r_cpu, _, _), (r_dev, dtypes, devices) = runs
        differ = [f"step {s} bucket {b}: {int((x.view(torch.int16) != y.view(torch.int16)).sum())}"
                  f" of {x.numel()}" for s, (hs, ds) in enumerate(zip(r_cpu, r_dev))
                  for b, (x, y) in enumerate(zip(hs, ds))
                  if not torch.equal(x.view(torch.int16), y.view(torch.int16))]
        digest = float(sum(float((x.double() * (1 + torch.arange(x.numel()) % 7)).sum())
                           for row in r_dev for x in row))
        out[str(dtype)] = dict(differ=differ[:5], n_differ=len(differ), dtypes=sorted(dtypes),
                               devices=sorted(devices), digest=digest,
                               nonzero=sum(int((x != 0).sum()) for row in r_dev for x in row))
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def phase_cuda(args, failures):
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-process",
                               "--cuda-device", args.cuda_device],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    t0, outs, hung = time.monotonic(), [], False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, args.timeout_s - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            hung = True
            p.kill()
            out, _ = p.communicate()
        outs.append(out)
    results = {}
    for r, out in enumerate(outs):
        for line in out.splitlines():
            if line.startswith("RESULT "):
                results[r] = json.loads(line[7:])
    check(not hung, f"cuda: no rank hung (limit {args.timeout_s} s)", failures)
    check(len(results) == 2, "cuda: both ranks finished", failures)
    if len(results) != 2:
        for r, out in enumerate(outs):
            print(f"--- rank {r} output (last 40 lines):\n" + "\n".join(out.splitlines()[-40:]))
        return
    a, b = results[0], results[1]
    print(f"--- cuda: {a['gpu']}, torch {a['torch']}, "
          f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}")
    for dtype in ("torch.bfloat16", "torch.float16"):
        va, vb = a[dtype], b[dtype]
        check(va["n_differ"] == 0 and vb["n_differ"] == 0,
              f"cuda, {dtype}: every step's results bitwise equal to the CPU run's ({STEPS} steps; "
              f"differ: {va['differ'] or vb['differ']})", failures)
        check(va["dtypes"] == [dtype] and all(d.startswith(args.cuda_device) for d in va["devices"]),
              f"cuda, {dtype}: results in the bucket's dtype on its device ({va['dtypes']}, "
              f"{va['devices']})", failures)
        check(va["nonzero"] > 0, f"cuda, {dtype}: results not all zero ({va['nonzero']})",
              failures)
        check(va["digest"] == vb["digest"], f"cuda, {dtype}: results identical on both ranks",
              failures)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all", choices=["all", "order", "cuda"])
    p.add_argument("--timeout-s", type=float, default=80)
    p.add_argument("--cuda-device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda phase: the device run's device (cpu: CPU against CPU, the "
                   "plumbing, no GPU needed)")
    p.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_process:
        rank_main(int(os.environ["RANK"]), args.cuda_device)
        return 0
    try:
        import torch
    except ImportError:
        print(f"torch_side_stream_test: SKIP ({sys.executable} has no torch)")
        return SKIP
    failures = []
    if args.phase in ("all", "order"):
        phase_order(failures)
    if args.phase in ("all", "cuda"):
        if args.cuda_device == "cuda" and not torch.cuda.is_available():
            print(f"cuda: SKIP (torch {torch.__version__} sees no GPU)", flush=True)
            if args.phase == "cuda":
                return SKIP
        else:
            phase_cuda(args, failures)
    print(f"torch_side_stream_test: {'FAIL' if failures else 'ok'} ({len(failures)} failed)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
