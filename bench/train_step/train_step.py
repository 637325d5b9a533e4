"""One rank of the training step-time benchmarks: bench/train_step/run.sh
starts four, one per network namespace, on CPU tensors; bench/gpu_step/run.sh
starts four under torchrun on one GPU (--device cuda, all ranks on the same
device). Times forward + backward + SGD step of the 25M-parameter MLP of
model.py (--width scales it) on a small synthetic batch, under one mode:

  ddp       DDP's default comm hook (gloo allreduce of each bucket)
  compute   DDP under no_sync(): no exchange at all, the compute floor
  gradex:A  DDP with gradex_hook, algorithm A (spardl, auto, ...), --density,
            start_iter 0, dense probes off (a short run never reaches one)

Environment (set by run.sh): RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT (rank
0's namespace address: torch's store, gloo's rendezvous and the embedded
gradex coordinator's advertised host), GLOO_SOCKET_IFNAME, GRADEX_DATA_IP,
UCX_TLS/UCX_NET_DEVICES, GRADEX_TIMELINE (torchrun sets the first ones and
LOCAL_RANK). Writes OUT/<tag>.rank<R>.json: per-step seconds and, for gradex,
state.stats() and the bucket layout. On CUDA a step ends with
torch.cuda.synchronize(), so that its time includes the GPU's work.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import CLASSES, IN_FEATURES, build_model, parameter_count  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True, help="ddp, compute, or gradex:ALGORITHM")
    p.add_argument("--steps", type=int, default=6, help="timed steps (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step (default 8)")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model and its gradients live (default cpu); cuda: "
                        "cuda:(LOCAL_RANK %% device count), so ranks may share one GPU")
    p.add_argument("--width", type=int, default=4096,
                   help="the MLP's hidden width (default 4096: 25.2M parameters)")
    p.add_argument("--dense-probe-period", default="0",
                   help="gradex's dense_probe_period (default 0: off, a short run never "
                        "reaches one; 'default': gradex's own)")
    p.add_argument("--timeout-s", type=float, default=300)
    p.add_argument("--out", required=True, help="directory for <tag>.rank<R>.json")
    p.add_argument("--tag", required=True, help="this run's name in OUT")
    a = p.parse_args()
    if a.mode not in ("ddp", "compute") and not a.mode.startswith("gradex:"):
        p.error(f"unknown --mode {a.mode!r} (ddp, compute, gradex:ALGORITHM)")
    if a.steps < 1 or a.warmup < 1 or a.batch < 1 or a.width < 1:
        p.error("--steps, --warmup, --batch and --width must be >= 1 (warm-up builds DDP's "
                "buckets)")
    if a.dense_probe_period == "default":
        a.dense_probe_period = None
    elif not a.dense_probe_period.isdigit():
        p.error(f"--dense-probe-period must be an integer >= 0 or 'default', got "
                f"{a.dense_probe_period!r}")
    else:
        a.dense_probe_period = int(a.dense_probe_period)
    return a


def pick_device(name):
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("train_step: --device cuda, but torch sees no GPU (torch.cuda.is_available() "
                 "is False); use --device cpu or run on a GPU machine")
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=a.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = pick_device(a.device)
    model = DDP(build_model(a.width).to(dev), device_ids=[dev] if dev.type == "cuda" else None)
    state = None
    if a.mode.startswith("gradex:"):
        import gradex.torch as gx
        state = gx.GradexState(algorithm=a.mode.split(":", 1)[1], density=a.density,
                               start_iter=0, timeout_s=a.timeout_s, model=model,
                               dense_probe_period=a.dense_probe_period)
        model.register_comm_hook(state, gx.gradex_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard
    x = torch.randn(a.batch, IN_FEATURES, generator=g).to(dev)
    y = torch.randint(0, CLASSES, (a.batch,), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=False)
        if a.mode == "compute":
            with model.no_sync():
                F.cross_entropy(model(x), y).backward()
        else:
            F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync(dev)
    if state is not None:
        state.flush()
    dist.barrier()  # every rank starts the timed steps together
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    result = {"mode": a.mode, "rank": rank, "world_size": world, "tag": a.tag,
              "parameters": parameter_count(model), "batch": a.batch, "warmup": a.warmup,
              "step_s": times, "first_timed_step": a.warmup, "device": str(dev),
              "torch": torch.__version__}
    if dev.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(dev)
        result["cuda"] = torch.version.cuda
    if state is not None:
        state.flush()
        result["stats"] = state.stats()
    with open(os.path.join(a.out, f"{a.tag}.rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()
    if state is not None:
        # Rank 0 holds the embedded coordinator: the others leave first, so
        # their leave is not cut off by rank 0's exit.
        if rank != 0:
            state.close()
        dist.barrier()
        if rank == 0:
            state.close()
    print(f"rank {rank} {a.mode}: median step {sorted(times)[len(times) // 2] * 1e3:.0f} ms",
          flush=True)
    sys.stdout.flush()
    # torch 1.13's DDP + gloo can deadlock in interpreter teardown (seen in
    # examples/train_fashion_mnist.py); everything is written, so leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
