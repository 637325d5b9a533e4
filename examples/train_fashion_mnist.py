#!/usr/bin/python3
"""Fashion-MNIST on CPU with DDP (gloo): dense allreduce or gradex's comm hook.

Launch one process per rank with torchrun or scripts/launch, e.g.

    torchrun --nproc_per_node=4 --redirects 1 --tee 1 \
        examples/train_fashion_mnist.py --algorithm spardl --density 0.01
    scripts/launch -n 4 -- /usr/bin/python3 examples/train_fashion_mnist.py --algorithm dense

Every run uses the same seeds (model init, data order), so runs differ only in
how gradients are exchanged. Rank 0 prints the test accuracy after every
epoch and appends a CSV row per epoch (--csv).
"""
import argparse
import csv
import gzip
import hashlib
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST's training-set pixel statistics


def read_idx(path):
    """An IDX file (gzip'ed or not) as a numpy array (the format of LeCun's MNIST)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data, header says {dims}")
    return data.reshape(dims)


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.reshape(len(x), -1), torch.from_numpy(labels.astype(np.int64))


def load_test(args):
    """The test split, or its first --test-subset images."""
    x, y = load_split(args.data_dir, "test")
    return (x[:args.test_subset], y[:args.test_subset]) if args.test_subset > 0 else (x, y)


def add_log_args(p):
    """--test-subset and --step-log (also train_dgs_fashion_mnist.py's)."""
    p.add_argument("--test-subset", type=int, default=0,
                   help="evaluate on the first N test images only (0: all 10000)")
    p.add_argument("--step-log", default="",
                   help="append 'rank,step,wall_s,loss' per step here ({rank} in the name: one "
                        "file per rank; the DGS example: gradex backend only)")


class MLP(nn.Module):
    """784-256-128-10 by default (235,146 parameters)."""

    def __init__(self, hidden=(256, 128)):
        super().__init__()
        sizes = (784,) + tuple(hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.out = nn.Linear(sizes[-1], 10)

    def forward(self, x):
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


class CNN(nn.Module):
    """A small LeNet-style CNN: conv 5x5 16, pool, conv 5x5 32, pool, 512-64-10
    (46,506 parameters): conv kernels and a dense head, unlike the MLPs."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.out(F.relu(self.fc1(x.flatten(1))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algorithm", default="dense",
                   help="'dense' (plain DDP, gloo allreduce), 'powersgd' (torch's PowerSGD hook, "
                        "--powersgd-rank, error feedback, warm start; one DDP bucket), "
                        "'default' (GradexState() with no algorithm named), a gradex algorithm "
                        "or 'auto'")
    p.add_argument("--powersgd-rank", type=int, default=4)
    p.add_argument("--powersgd-start-iter", type=int, default=10)
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--teams", type=int, default=0)
    p.add_argument("--start-iter", type=int, default=None,
                   help="dense steps before sparsifying (default: gradex's choice)")
    p.add_argument("--min-compression-rate", type=float, default=2.0)
    p.add_argument("--timeout-s", type=float, default=60.0)
    p.add_argument("--dense-probe-period", type=int, default=None,
                   help="GradexState(dense_probe_period=...): 0 never times a dense step, so "
                        "no bucket falls back to dense on this machine's load (runs repeatable); "
                        "default: gradex's (50 for auto, else 0)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="stop once this much training wall time has passed (0: none); the ranks "
                        "agree every 4 steps, so every rank stops at the same step")
    add_log_args(p)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default="sgd")
    p.add_argument("--lr", type=float, default=None, help="default: 0.05 (sgd), 0.001 (adam, adamw)")
    p.add_argument("--momentum", type=float, default=0.9, help="sgd's")
    p.add_argument("--nesterov", action="store_true", help="sgd's")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--hand-over", action="store_true",
                   help="gradex runs: GradexState(optimizer=opt), the optimizer as built (gradex "
                        "takes over SGD's momentum); dense runs ignore it")
    p.add_argument("--momentum-correction", action="store_true",
                   help="gradex runs: apply --momentum in the hook (DGC's momentum correction, "
                        "GradexState(momentum_correction=...)) and run SGD without momentum, "
                        "written by hand; dense runs ignore it")
    p.add_argument("--no-factor-masking", action="store_true",
                   help="with --momentum-correction: keep the velocity of entries just sent")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="an algorithm parameter by catalog name (repeatable), e.g. "
                        "covap_interval=3 (pins COVAP's interval: no CCR profiler)")
    p.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                   help="mlp (--hidden) or cnn (the small CNN above)")
    p.add_argument("--hidden", default="256,128", help="MLP hidden sizes")
    p.add_argument("--diagnose", default="",
                   help="gradex runs: per layer, how the applied update compares with dense "
                        "momentum's (examples/exchange_diagnosis.py), appended to this CSV; adds "
                        "a dense allreduce per bucket")
    p.add_argument("--diagnose-every", type=int, default=10, help="steps between --diagnose rows")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--csv", default="", help="append one row per epoch here (rank 0)")
    p.add_argument("--label", default="", help="the CSV's algorithm column (default: --algorithm)")
    p.add_argument("--stall-at-step", type=int, default=-1,
                   help="this rank sleeps --stall-s seconds before that step (a straggler stuck in "
                        "its own compute: the deploy checks' stall alert)")
    p.add_argument("--stall-s", type=float, default=0.0)
    p.add_argument("--device", choices=("cpu", "auto", "cuda"), default="cpu",
                   help="cpu; cuda: the GPU of this rank's LOCAL_RANK (gradex stages its "
                        "buckets from there: a CUDA build of gradex); auto: cuda when torch "
                        "has CUDA and a GPU, else cpu (the chart's GPU pods)")
    p.add_argument("--check-identical", action="store_true",
                   help="at the end, compare every rank's parameters bitwise (exit 3 if they differ)")
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = 0.05 if args.optimizer == "sgd" else 0.001
    if args.hand_over and args.momentum_correction:
        p.error("--hand-over and --momentum-correction: one or the other")
    args.params = {}
    for kv in args.param:
        name, sep, value = kv.partition("=")
        try:
            args.params[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            p.error(f"--param wants NAME=NUMBER, got {kv!r}")
    return args


def init_distributed():
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            sys.exit(f"train_fashion_mnist: {var} is not set; launch with torchrun or scripts/launch")
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def make_model(args):
    torch.manual_seed(args.seed)
    if getattr(args, "model", "mlp") == "cnn":  # other examples pass seed and hidden only
        return CNN()
    return MLP(tuple(int(h) for h in args.hidden.split(",") if h))


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 2000]).argmax(1) == y[i:i + 2000]).sum())
                      for i in range(0, len(x), 2000))
    model.train()
    return correct / len(x)


def train_step(model, opt, x, y):
    """One optimizer step on the batch (x, y); returns its training loss."""
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return float(loss)


def params_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def all_identical(model):
    """Every rank's parameter digest, compared across ranks."""
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, params_digest(model))
    return all(d == digests[0] for d in digests), digests


def pick_device(choice):
    """The rank's device: its LOCAL_RANK's GPU (torchrun runs one rank per GPU)."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        sys.exit("train_fashion_mnist: --device cuda, but this torch has no CUDA or sees no GPU")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if local >= torch.cuda.device_count():
        sys.exit(f"train_fashion_mnist: LOCAL_RANK {local}, but {torch.cuda.device_count()} GPUs")
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def model_name(args):
    return "cnn" if args.model == "cnn" else "mlp-" + args.hidden.replace(",", "-")


def step_sent(state, calls):
    """The bytes this rank sent in the step just ended: the last call of each
    bucket layout that ran in it (stats() keeps a layout DDP no longer uses,
    such as its first step's, with its last call's bytes)."""
    total = 0
    for b in state.stats():
        key = tuple(tuple(s) for s in b["spans"])
        if b["calls"] != calls.get(key):
            calls[key] = b["calls"]
            total += b["sent_bytes"]
    return total


def sent_per_step(model, state, psgd, world, steps, gradex_sent):
    """Bytes one rank sends per step, averaged over the run: gradex's own count
    (stats()' last call per bucket, summed every step); for dense and PowerSGD, what a ring allreduce of the floats
    sends, 2(P-1)/P * 4 bytes a float (PowerSGD: its P and Q factors and the
    tensors it leaves uncompressed, by its own compression_stats(), dense
    before start_powerSGD_iter)."""
    if steps == 0:
        return 0
    if state is not None:
        return gradex_sent / steps
    n = sum(p.numel() for p in model.parameters())
    floats = n * steps
    if psgd is not None:
        _, before, after = psgd.compression_stats()
        floats = n * steps - before + after
    return 2 * (world - 1) / world * 4 * floats / steps


def make_optimizer(args, params, momentum):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=momentum, nesterov=args.nesterov,
                               weight_decay=args.weight_decay)
    cls = torch.optim.Adam if args.optimizer == "adam" else torch.optim.AdamW
    return cls(params, lr=args.lr, weight_decay=args.weight_decay)


def train(args, rank, world, on_epoch=None):
    """Trains; returns (ddp_model, gradex_state_or_None, rows)."""
    torch.set_num_threads(1)  # one core's share per rank: ranks share the machine
    device = pick_device(args.device)
    x_train, y_train = (t.to(device) for t in load_split(args.data_dir, "train"))
    x_test, y_test = (t.to(device) for t in load_test(args))
    powersgd = args.algorithm == "powersgd"
    if powersgd:
        # torch 1.13's PowerSGD hook waits inside gloo's callbacks and
        # deadlocks with two buckets in flight: one bucket for the model.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 30
    model = DDP(make_model(args).to(device),
                device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=1024 if powersgd else 25)
    psgd = None
    if powersgd:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as P
        psgd = P.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                               start_powerSGD_iter=args.powersgd_start_iter,
                               use_error_feedback=True, warm_start=True, random_seed=args.seed)
        model.register_comm_hook(psgd, P.powerSGD_hook)
    sparse = args.algorithm not in ("dense", "powersgd")
    # With momentum correction written by hand the hook's result is already
    # the momentum update direction (the velocity lives in GradexState):
    # plain SGD. With --hand-over gradex makes that change itself.
    by_hand = sparse and args.momentum_correction and args.momentum > 0
    opt = make_optimizer(args, model.parameters(), momentum=0 if by_hand else args.momentum)
    state = diagnosis = None
    if sparse:
        import gradex.torch as gx
        extra = dict(optimizer=opt) if args.hand_over else dict(
            momentum_correction=args.momentum if by_hand else 0)
        state = gx.GradexState(algorithm=None if args.algorithm == "default" else args.algorithm,
                               density=None if args.algorithm == "default" else args.density, teams=args.teams,
                               start_iter=args.start_iter,
                               min_compression_rate=args.min_compression_rate,
                               timeout_s=args.timeout_s, model=model,
                               dense_probe_period=args.dense_probe_period,
                               factor_masking=not args.no_factor_masking, **extra, **args.params)
        hook = gx.gradex_hook
        if args.diagnose:
            from exchange_diagnosis import Diagnosis
            momentum = args.momentum if state.momentum_correction > 0 else 0.0
            diagnosis = Diagnosis(args.diagnose, model, momentum, every=args.diagnose_every)
            hook = diagnosis.wrap(hook)
        model.register_comm_hook(state, hook)
    in_hook = by_hand or (state is not None and state.momentum_correction > 0)
    label = args.label or args.algorithm
    rows, wall, step, sent, calls = [], 0.0, 0, 0, {}
    n = len(x_train) - len(x_train) % (world * args.batch_size)
    log = StepLog(args.step_log, rank)
    over_budget = False
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(args.seed + epoch))
        mine = order[:n][rank::world]
        losses = []
        t0 = time.perf_counter()
        for i in range(0, len(mine), args.batch_size):
            idx = mine[i:i + args.batch_size]
            if step == args.stall_at_step and args.stall_s > 0:
                print(f"rank {rank}: stalling {args.stall_s:g} s before step {step}", flush=True)
                time.sleep(args.stall_s)
            losses.append(train_step(model, opt, x_train[idx], y_train[idx]))
            step += 1
            if state is not None and rank == 0:
                sent += step_sent(state, calls)
            log.add(step, wall + time.perf_counter() - t0, losses[-1])
            if args.time_budget_s > 0 and step % 4 == 0:
                over_budget = budget_spent(wall + time.perf_counter() - t0, args.time_budget_s)
            if (args.max_steps and step >= args.max_steps) or over_budget:
                break
        wall += time.perf_counter() - t0
        acc = evaluate(model, x_test, y_test) if rank == 0 else float("nan")
        row = dict(algorithm=label, optimizer=args.optimizer, model=model_name(args),
                   batch=args.batch_size, seed=args.seed,
                   density=args.density if state else 1.0,
                   start_iter=state.start_iter if state else 0,
                   momentum_in_hook=("masked" if not args.no_factor_masking else "unmasked")
                   if in_hook else "no", ranks=world, epoch=epoch, steps=step,
                   wall_s=round(wall, 3), train_loss=round(float(np.mean(losses)), 5),
                   test_acc=round(acc, 5),
                   sent_bytes_per_step=round(sent_per_step(model, state, psgd, world, step, sent)))
        rows.append(row)
        if rank == 0:
            print(f"[{label}] epoch {epoch} step {step} wall {wall:.1f}s "
                  f"train_loss {row['train_loss']:.4f} test_acc {100 * acc:.2f}%", flush=True)
        if on_epoch:
            on_epoch(row)
        if (args.max_steps and step >= args.max_steps) or over_budget:
            break
    log.close()
    if state is not None:
        state.flush()
    if diagnosis is not None:
        diagnosis.write(label)
    return model, state, rows


class StepLog:
    """Per-step training loss against training wall time (data loading and
    evaluation excluded), for loss-vs-time plots; a no-op without a path."""

    def __init__(self, path, rank):
        self.f = None
        if path:
            self.f = open(path.replace("{rank}", str(rank)), "a")
            self.rank = rank

    def add(self, step, wall_s, loss):
        if self.f:
            self.f.write(f"{self.rank},{step},{wall_s:.4f},{loss:.6f}\n")

    def close(self):
        if self.f:
            self.f.close()


def budget_spent(wall_s, budget_s):
    """True on every rank once any rank has trained budget_s seconds: DDP ranks
    must leave the loop at the same step or the next allreduce hangs."""
    flag = torch.tensor([1.0 if wall_s >= budget_s else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def append_csv(path, rows):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        if new:
            w.writeheader()
        w.writerows(rows)


def main(argv=None):
    args = parse_args(argv)
    rank, world = init_distributed()
    model, state, rows = train(args, rank, world)
    status = 0
    if args.check_identical:
        same, digests = all_identical(model)
        if rank == 0:
            # The digest lets two runs of one seed be compared (reproducibility).
            print(f"parameters identical on all {world} ranks: {same}"
                  + (f" (sha256 {digests[0][:16]})" if same else f" {digests}"), flush=True)
        status = 0 if same else 3
    if rank == 0 and args.csv and rows:
        append_csv(args.csv, rows)
    if state is not None:
        if rank == 0:
            for b in state.stats():
                print(f"[{args.label or args.algorithm}] bucket {b['elements']} elements: "
                      f"{b['algorithm']} calls {b['calls']} dense {b['dense_calls']} "
                      f"last {1000 * b['last_s']:.2f} ms sent {b['sent_bytes']} B", flush=True)
        state.close()
    return status


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is written and gradex has left the job. torch 1.13 can
    # deadlock tearing down DDP with gloo (the Reducer's ProcessGroupGloo joins
    # a worker thread that waits for the GIL the exiting thread holds; seen
    # here at exit after training), so skip the interpreter's teardown.
    os._exit(code)
