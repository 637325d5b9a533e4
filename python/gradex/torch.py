"""gradex as a PyTorch DDP communication hook, and DGSOptimizer (asynchronous
training through gradex's parameter server: gradex.dgs).

    import gradex.torch as gx
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    state = gx.GradexState(algorithm="spardl", optimizer=opt)
    ddp_model.register_comm_hook(state, gx.gradex_hook)

Shaped like PyTorch's ``powerSGD_hook``: ``gradex_hook(state, bucket)`` returns,
per GradBucket, a ``torch.futures.Future`` whose value is the bucket's mean over
ranks, as DDP's default allreduce hook does. The exchange runs on the C++
client's progress thread, in the order DDP issues buckets (the README's "Use it
from PyTorch" and "Configuration" sections document the options and the
environment).
"""
import atexit
import itertools
import os
import sys
import warnings
import weakref

import torch
import torch.distributed as dist

from gradex._C import AUTO_WARMUP_STEPS, Client, GradexError, option_table, velocities_of
from gradex.dgs import DGSOptimizer
from gradex.handover import plan_handover
from gradex.rendezvous import store_rendezvous

__all__ = ["GradexState", "gradex_hook", "GradexError", "DGSOptimizer"]

# Buckets of these dtypes go through a float32 copy (warned once per state).
_CONVERTED = (torch.float16, torch.bfloat16, torch.float64)
# Each GradexState of a process takes the next rendezvous namespace; every rank
# creates its states in the same order, so the namespaces match across ranks.
_generation = itertools.count()
# Every Python keyword of the client's option table (the README's table).
# (params: GradexState's **params are they.)
_OPTION_KEYWORDS = frozenset(r["py_keyword"] for r in option_table()
                             if r["py_keyword"] and r["py_keyword"] != "params")


def _close_ref(ref):
    state = ref()
    if state is not None:
        try:
            state.close()
        except Exception:  # exiting: nothing left to tell
            pass


class GradexState:
    """One training job's gradex client, created on every rank.

    Args:
        algorithm: a catalog name (``spardl``, ``spardl-bsag``, ``oktopk``,
            ``topka``, ``gaussiank``, ``covap``, ``dense-ring``, ...) or
            ``"auto"``: chosen per bucket from the catalog's cost model with the
            link alpha/beta the agents measure.
        density: fraction of each bucket's entries sent per step (k = ceil(d*n)).
        teams: SparDL team count; 0 lets the coordinator choose.
        start_iter: steps [0, start_iter) run dense (as PowerSGD's
            ``start_powerSGD_iter``), a warm-up before sparsification. Not
            given, with ``algorithm="auto"`` (or none) and dense probes on:
            ``AUTO_WARMUP_STEPS`` (384), in whose odd steps each bucket's
            planned sparse exchange is also timed on a copy of its gradient,
            so that the coordinator chooses its side (sparse, or dense where
            dense is faster) before it runs sparse; otherwise 0.
        min_compression_rate: a bucket whose sparse message would be less than
            this factor smaller than its dense one stays dense.
        timeout_s: deadline for joining and for every bucket's exchange; a dead
            peer or coordinator becomes a GradexError within it. With the
            coordinator embedded in rank 0 (no ``coordinator``) it is also that
            coordinator's step deadline and rendezvous timeout (a standalone
            coordinator's default: 30 s).
        coordinator: ``host:port`` of an existing coordinator (default:
            ``GRADEX_COORDINATOR``; without one, rank 0 starts one in-process and
            publishes its address and a fresh token through torch's store).
        token: the job's token (default: ``GRADEX_TOKEN`` or the contents of
            ``GRADEX_TOKEN_FILE``).
        model: optional module (or DDP wrapper) whose ``parameters()`` order
            keys the residuals; without it a parameter's key is the order in
            which the first step's buckets show it (identical on every rank).
        job, metrics_port, data_ip, timeline_path: as ``GRADEX_JOB``,
            ``GRADEX_METRICS_PORT``, ``GRADEX_DATA_IP``, ``GRADEX_TIMELINE``
            (the keyword wins). The metrics port is the base of a node's
            ranks: this process serves on metrics_port + ``LOCAL_RANK``. The environment also gives the metrics
            endpoint's bind address (``GRADEX_METRICS_ADDR``, default
            127.0.0.1) and TLS to the coordinator (``GRADEX_TLS_CA_FILE``,
            ``GRADEX_TLS_SERVER_NAME``, ``GRADEX_TLS_CERT_FILE``,
            ``GRADEX_TLS_KEY_FILE``).
        dense_probe_period: every this many steps each sparse bucket's dense
            exchange is timed against its sparse one ("never slower than
            dense"; 0 never): a dense exchange of zeros of the bucket's size
            beside its own, so the training never sees a probe (it costs one
            dense exchange a period). Default: 50 with ``algorithm="auto"``
            (or left to the plan), which needs the timings; 0 otherwise, so
            that a named algorithm never falls back to dense on this
            machine's timings (runs repeatable). start_iter, min_compression_rate
            and dense_probe_period: every rank runs rank 0's values (agreed
            in-band); a rank given others warns once per field.
        refuse_nonfinite: NaN or Inf in a gradient. True (default): they are
            exchanged as 0 (no peer's result or residual is poisoned), the
            bucket gets every rank's finite result and its future fails with a
            GradexError naming how many and where, so ``backward()`` raises;
            a rank that sends NaN or Inf anyway is evicted as a sender of bad
            frames. False: summed like any value (every rank's result turns
            non-finite, as with DDP's allreduce; for loss scalers that skip
            such steps). Every rank runs rank 0's value (agreed in-band).
        pipeline: select bucket b+1 while bucket b exchanges (default: on,
            or ``GRADEX_PIPELINE``; False selects each bucket after the
            previous one's exchange, the same results bit for bit).
        optimizer: the job's torch optimizer, as built. SGD with momentum m
            (plain or Nesterov): m moves into the hook as
            ``momentum_correction=m`` and the optimizer's momentum is set to 0,
            its weight decay moves with it (added to the gradient before the
            velocity, as torch's SGD does); ``close()`` gives both back.
            Nesterov runs as plain (heavy-ball) momentum correction. Other
            optimizers (Adam, AdamW, unknown) are left unchanged and run with
            error feedback only. One line (``handover``, printed by rank 0)
            says what was done; a warning where accuracy below dense is
            expected. Build the state before ``optimizer.load_state_dict()``.
        momentum_correction: 0 (default, off) or the optimizer's momentum m
            in [0, 1), moved into the hook as DGC's momentum correction (Lin
            et al., ICLR 2018, Alg. 1): each rank keeps a velocity u <- m*u + g
            per parameter and exchanges u instead of g, so the error-feedback
            residual accumulates velocity and an entry held back for many
            steps arrives with the momentum it would have had. The hook's
            result is then the update direction: build the optimizer with
            momentum=0 (plain SGD with the same lr).
        factor_masking: with momentum_correction, after a sparse exchange
            (fewer than half of the bucket's result entries non-zero) zero the
            velocity of the entries the result applied (DGC's momentum factor
            masking: a sent entry does not keep pushing with stale momentum).
            Dense steps (start_iter, dense probes, fallbacks) keep it.
        allow_plan_override: algorithm, density, teams and **params are the
            job plan's (a coordinator's job config, or rank 0's options). A
            rank that asks for other values fails here with a GradexError
            naming each option, both values and the plan's source; True runs
            the plan's values with a warning per option instead.
        **params: algorithm parameters by catalog name (numbers).

    Every keyword left out (None) takes the option table's default (the
    README's "Configuration" table, ``gradex._C.option_table()``) and asks
    nothing of the plan. The table's other Python keywords (``mean``,
    ``advertise_host``, ``max_bucket_elements``, ...) are accepted too.
    """

    def __init__(self, algorithm=None, density=None, teams=None, start_iter=None,
                 min_compression_rate=None, timeout_s=60, coordinator=None, token=None,
                 *, model=None, job=None, metrics_port=None, data_ip=None, timeline_path=None,
                 dense_probe_period=None, refuse_nonfinite=True, momentum_correction=None,
                 factor_masking=True, pipeline=None, allow_plan_override=None, optimizer=None,
                 **params):
        # None: not given (the option table's default, and nothing asked of
        # the plan). The C++ option table checks every value and its range;
        # its other keywords (mean, advertise_host, ...) are options here
        # too, not algorithm parameters.
        other = {k: params.pop(k) for k in list(params) if k in _OPTION_KEYWORDS}
        for k, v in params.items():
            # A misspelt keyword lands here: name it, not "params".
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(
                    f"gradex: GradexState() got an unexpected keyword argument {k!r} (its "
                    f"**params are algorithm parameters by catalog name, numbers; the options "
                    f"are the README's table, `gradex-options`)")
        handover = None
        if optimizer is not None:
            if momentum_correction:
                raise ValueError("gradex: give optimizer= or momentum_correction=, not both "
                                 "(optimizer= moves its momentum into the hook itself)")
            handover = plan_handover(optimizer)
            momentum_correction = handover.momentum
            if start_iter is None and handover.start_iter:
                start_iter = handover.start_iter
        momentum_correction = 0.0 if momentum_correction is None else momentum_correction
        if dense_probe_period is None and algorithm not in (None, "auto"):
            dense_probe_period = 0
        options = dict(algorithm=algorithm, density=density, teams=teams, start_iter=start_iter,
                       min_compression_rate=min_compression_rate, timeout_s=timeout_s,
                       coordinator=coordinator, token=token, job=job, metrics_port=metrics_port,
                       data_ip=data_ip, timeline_path=timeline_path,
                       dense_probe_period=dense_probe_period, refuse_nonfinite=refuse_nonfinite,
                       momentum_correction=momentum_correction, factor_masking=factor_masking,
                       pipeline=pipeline, allow_plan_override=allow_plan_override,
                       params=params or None, **other)
        if dist.is_available() and dist.is_initialized():
            options["rank"] = dist.get_rank()
            options["world_size"] = dist.get_world_size()
        prefix = f"gradex/{next(_generation)}/"
        rdv_set, rdv_get = store_rendezvous(prefix, timeout_s)
        self.timeout_s = float(timeout_s)
        self.algorithm = algorithm
        self.density = density
        # As asked (rank 0's runs); not given, the client's choice
        # (ApplyDependentDefaults): auto's warm-up where dense probes are on.
        warmup = (start_iter is None and algorithm in (None, "auto")
                  and dense_probe_period != 0)
        self.start_iter = AUTO_WARMUP_STEPS if warmup else (start_iter or 0)
        self._keys = {}
        if model is not None:
            for i, p in enumerate(model.parameters()):
                self._keys[p.data_ptr()] = i
        self._warned_dtypes = set()
        # The velocities live with the residuals, per span, in the C++
        # bucket pipeline (and in its SaveState blob).
        self.momentum_correction = float(momentum_correction)
        self.factor_masking = bool(factor_masking)
        self._client = Client.create(options, True, rdv_set, rdv_get)
        atexit.register(_close_ref, weakref.ref(self))
        # The optimizer changes only once the client has joined (a failed
        # join leaves it as it was).
        self._handover = handover
        self._decay = {}
        self.handover = ""
        if handover is not None:
            handover.apply()
            self._decay = handover.decay
            extras = []
            if warmup:
                extras.append(f"auto: the first {AUTO_WARMUP_STEPS} steps run dense while each "
                              "bucket's sparse exchange is timed beside them, then each bucket "
                              "runs sparse unless dense was 10% faster, and never moves from "
                              "sparse to dense later (that costs accuracy; the default on 3 "
                              "models, 2 epochs: within 0.5 points of dense, docs/measurements.md)")
            elif start_iter:
                extras.append(f"start_iter {start_iter}")
            if dense_probe_period == 0:
                extras.append("no dense probes")
            self.handover = "; ".join([handover.note] + extras)
            # (The client learns its rank from the coordinator later.)
            rank = options.get("rank", int(os.environ.get("RANK", "0") or 0))
            if rank == 0:
                if handover.cost:
                    warnings.warn("gradex: " + self.handover, stacklevel=2)
                else:
                    print("gradex: " + self.handover, file=sys.stderr, flush=True)

    # The parameters of a bucket as (key, elements) spans, in bucket order.
    def _spans(self, bucket):
        spans = []
        for p in bucket.parameters():
            key = self._keys.get(p.data_ptr())
            if key is None:
                key = self._keys[p.data_ptr()] = len(self._keys)
            spans.append((key, p.numel()))
        return spans

    @property
    def client(self):
        if self._client is None:
            raise GradexError("FAILED_PRECONDITION: this GradexState is closed")
        return self._client

    @property
    def rank(self):
        return self.client.rank

    @property
    def world_size(self):
        return self.client.world_size

    @property
    def step(self):
        """The next training step (steps end with DDP's last bucket)."""
        return self.client.step

    @property
    def coordinator(self):
        """host:port of the coordinator in use."""
        return self.client.coordinator

    def stats(self):
        """Per bucket layout: spans, elements, algorithm, density, calls,
        dense_calls, fallback_switches, sent/recv bytes, last/sparse/dense
        seconds, residual_norm, threshold_reuse_hits/misses (local top-k
        selections that did / did not finish among the candidates of the last
        threshold: the same selection either way), and for CUDA buckets
        device_path ("host"; "device selection": residual on the GPU, only
        the selected entries and the result cross PCIe; "whole-bucket
        staging": copied whole to the host and back) with the last call's
        device_to_host_bytes /
        host_to_device_bytes over PCIe."""
        return self.client.stats()

    def flush(self):
        """Waits (up to timeout_s) until every issued bucket has ended."""
        self.client.flush()

    def state_dict(self):
        """Residuals, the step counter and (momentum_correction) the velocities,
        for a checkpoint (call between steps)."""
        blob = self.client.save_state()
        state = {"version": 1, "client": blob,
                 "velocity": {k: torch.frombuffer(bytearray(u), dtype=torch.float32)
                              for k, u in velocities_of(blob).items()}}
        if self._handover is not None:
            # What was taken from the optimizer: the optimizer's own
            # state_dict() holds it with momentum 0, so a resumed run must
            # build its state from the optimizer as built, not as saved.
            state["handover"] = dict(self._handover.record)
        return state

    def load_state_dict(self, state):
        if state.get("version") != 1 or not isinstance(state.get("client"), (bytes, bytearray)):
            raise ValueError("gradex: not a GradexState.state_dict() (version 1)")
        velocity = state.get("velocity", {})
        if not isinstance(velocity, dict) or not all(
                isinstance(u, torch.Tensor) and u.dtype == torch.float32 and u.dim() == 1
                for u in velocity.values()):
            raise ValueError("gradex: state_dict()['velocity'] must map keys to 1-D float32 tensors")
        saved = state.get("handover")
        mine = self._handover.record if self._handover is not None else None
        if saved != mine:
            raise ValueError(
                f"gradex: the checkpoint's optimizer hand-over {saved} is not this state's "
                f"{mine}; build GradexState(optimizer=opt) from the optimizer as built, "
                "before opt.load_state_dict()")
        # The dict's velocities are the ones restored (a checkpoint written
        # before they moved into the blob has them only there).
        self.client.load_state(bytes(state["client"]), {
            int(k): u.detach().cpu().contiguous().numpy().tobytes() for k, u in velocity.items()})

    def close(self):
        """Leaves the job; buckets still queued fail. Idempotent. The rank
        hosting the embedded coordinator waits (up to min(timeout_s, 10) s)
        for the others to leave first. An optimizer handed over gets its
        momentum and weight decay back (its momentum buffer starts from 0:
        the velocities were each rank's, in the hook)."""
        client, self._client = self._client, None
        if self._handover is not None:
            self._handover.restore()
            self._decay = {}
        if client is not None:
            client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def gradex_hook(state, bucket):
    """DDP communication hook: the bucket's mean over ranks, through gradex.

    float32 buckets are exchanged in place; float16, bfloat16 and float64 ones
    through a float32 copy (warned once); other dtypes raise TypeError. CUDA
    buckets are passed as device memory; one issued on a stream other than the
    device's default stream is handed over with that stream (gradex reads it
    once the stream has passed the hook, without blocking the caller). With
    ``momentum_correction`` the
    client replaces the bucket's gradient by the rank's velocity before the
    exchange (GradexState). A failed exchange (dead rank, timeout) sets the
    future's exception: DDP raises it from ``backward()`` as a
    RuntimeError carrying the gradex message.
    """
    buf = bucket.buffer()
    work = buf
    if buf.dtype != torch.float32:
        if buf.dtype not in _CONVERTED:
            raise TypeError(f"gradex: bucket {bucket.index()} has dtype {buf.dtype}; gradex "
                            "exchanges float32 (float16, bfloat16 and float64 are converted)")
        if buf.dtype not in state._warned_dtypes:
            state._warned_dtypes.add(buf.dtype)
            warnings.warn(f"gradex: {buf.dtype} buckets are exchanged as float32 copies",
                          stacklevel=2)
        work = buf.to(torch.float32)
    if not work.is_contiguous():
        work = work.contiguous()
    if state._decay:
        # The weight decay of a handed-over SGD: before the velocity, as in
        # torch's SGD (g + wd * w; the parameters are the same on every rank).
        off = 0
        for p in bucket.parameters():
            n = p.numel()
            wd = state._decay.get(p.data_ptr())
            if wd:
                work[off:off + n].add_(p.detach().reshape(-1).to(work.dtype), alpha=wd)
            off += n
    # gradex's CUDA work follows the legacy default stream (its streams are
    # blocking ones). A bucket written on another stream (the trainer's own)
    # is handed over with that stream: gradex records an event on it and its
    # selection thread waits for the event, so this thread is not blocked.
    # gradex hands the result back to the same stream, which the copy back of
    # a converted bucket then runs on (_copy_result).
    side = None
    if work.is_cuda and (torch.cuda.current_stream(work.device)
                         != torch.cuda.default_stream(work.device)):
        side = torch.cuda.current_stream(work.device)
    stream = side.cuda_stream if side is not None else 0
    spans = state._spans(bucket)
    fut = torch.futures.Future()
    index = bucket.index()

    def done(code, message):
        if code != 0:
            fut.set_exception(GradexError(f"gradex: bucket {index} failed: {message}"))
            return
        if work is not buf:
            _copy_result(buf, work, side)
        fut.set_result(buf)

    state.client.allreduce_async(spans, work.data_ptr(), work.numel(), work.is_cuda,
                                 bucket.is_last(), done, stream)
    # Chained so that a failure marks the returned future as failed in C++
    # (DDP's reducer then raises it) rather than holding an exception object
    # where DDP expects a tensor.
    return fut.then(_unwrap)


def _copy_result(buf, work, side, cuda=torch.cuda):
    """The float32 result `work` back into the bucket `buf` (fp16, bf16, f64),
    on the progress thread. gradex hands the result back only to the stream
    the bucket came from: `side`, or the legacy default stream when None
    (this thread's current stream then, so a plain copy follows it). On a side
    stream the copy must run on that stream: on this thread's default stream
    it would not be ordered after gradex's writes of `work`. The host waits
    for the copy alone (an event after it, not the whole stream, which may
    hold the trainer's later work) before the future completes, since DDP may
    read the result on any stream. `cuda`: torch.cuda (a stand-in in tests)."""
    if side is None:
        buf.copy_(work)
        return
    with cuda.stream(side):
        buf.copy_(work)
        copied = cuda.Event()
        copied.record(side)
    copied.synchronize()


def _unwrap(fut):
    return fut.value()
