#!/usr/bin/python3
"""gradex.torch end to end with 2 rank processes (ctest torch_hook; docs in
README "Use it from PyTorch"). Phases, each a fresh pair of processes:

  conservation  integer-valued buckets through gradex_hook directly (a bucket
                stand-in with DDP's GradBucket methods), a bucket-layout change
                half way (DDP's rebuild), then zero buckets until every
                residual is empty: the sum of P * result over the steps equals
                the sum of every rank's gradients exactly, and results are
                bitwise identical on both ranks. Also: float64 converted, int
                refused with TypeError.
  momentum      GradexState(momentum_correction=0.5, pipeline=False) (DGC's momentum
                correction with factor masking), buckets of multiples of 2^10
                (every sum below exact in float32) and a layout change half
                way: sum over steps and ranks of the velocities fed in (a
                float64 reference u <- 0.5 u + g, masked where a sparse result
                applied an entry) == sum of P * result + every rank's final
                residual (from state_dict()), exactly; the hook's velocities
                equal the reference bitwise; results identical on both ranks.
  cuda          the device path against the host path, bit for bit: on each
                rank the same bucket-stand-in sequence (12 steps, a layout
                change half way, momentum_correction=0.5, a dense probe every
                5 steps) runs with CPU tensors and then with CUDA tensors,
                each with a fresh GradexState, for integer-valued and for
                Gaussian gradients (on a GPU also integers written on a
                side stream behind a sleeping kernel, handed over from that
                stream: the hook waits for it): every step's results, and the final
                residuals and velocities (state_dict()), bitwise equal;
                stats()'s device_path "host" on CPU, and on CUDA "device
                selection" for the SparDL family's sparse steps ("whole-bucket
                staging" for a span's first momentum step, dense probes and
                other algorithms). Then real DDP of one Linear layer (integer
                inputs, a linear loss: integer gradients on any device; TF32
                off) on CPU and on CUDA through gradex_hook: final parameters
                and gradex states bitwise equal, and a float64 run equal to
                the float32 one (every step was exact). Skipped, and passed
                inside --phase all, where torch sees no GPU; --cuda-device cpu
                runs it CPU against CPU (the plumbing, on any machine).
  train         Fashion-MNIST MLP under DDP + gradex_hook for --steps steps:
                rank 0's test accuracy above --min-accuracy, parameters bitwise
                identical on both ranks.
  handover      GradexState(optimizer=SGD(momentum=0.9)) and the hand-written
                momentum_correction=0.9 (SGD with momentum 0, no dense probes)
                through real DDP for 12 steps: parameters and velocities
                bitwise equal; with weight_decay, equal to wd * w added to
                each gradient by hand; the optimizer's momentum is 0 while
                handed over and close() gives it back; both state_dicts
                saved half way resume the second half bitwise, and a state
                built without the hand-over refuses that checkpoint; Adam is
                left unchanged with one warning saying what it gets; Nesterov
                says it runs as plain momentum correction. (Not in --phase
                all: ctest torch_handover runs it.)
  dead-rank     rank 1 exits mid-training; rank 0's backward raises a gradex
                error within timeout_s (+ slack), nothing hangs.
  bad-join      GradexState(...) against a gradex-coordinator with another
                token, against a port nobody listens on, and with neither a
                coordinator nor a process group: GradexError within
                timeout_s (+ slack) naming the fix; asking for another
                algorithm than its job config's: GradexError naming both and
                the coordinator (with allow_plan_override: one warning); a coordinator whose
                --metrics-port is taken exits naming the fix.

Exit 0 pass, 1 fail, 77 skip (no torch for this Python; --phase cuda without a GPU).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", default="all",
                   choices=["all", "conservation", "momentum", "cuda", "train", "dead-rank",
                            "bad-join", "handover"])
    p.add_argument("--coordinator-bin", default="", help="gradex-coordinator, for bad-join")
    p.add_argument("--target", default="", help="(bad-join rank process) host:port")
    p.add_argument("--algorithm", default="spardl")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument("--expect-module", default="ON", help="OFF: a missing gradex module is a skip")
    p.add_argument("--phase-timeout-s", type=float, default=100)
    p.add_argument("--cuda-device", default="cuda", choices=["cuda", "cpu"],
                   help="cuda phase: the device run's device (cpu: CPU against CPU, no GPU needed)")
    return p.parse_args()


def run_bad_join(args, failures):
    import tempfile
    if not args.coordinator_bin:
        print("bad-join: skipped (no --coordinator-bin)")
        return
    import shutil
    tmp = tempfile.mkdtemp(prefix="gradex-bad-join-")
    with open(os.path.join(tmp, "job.json"), "w") as f:
        json.dump({"job_id": "gradex", "algorithm": "spardl", "density": 0.01, "world_size": 2}, f)
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write("the-token-of-this-test\n")
    port = free_port()
    log = open(os.path.join(tmp, "coordinator.log"), "w")
    coord = subprocess.Popen([args.coordinator_bin, "--job-config", os.path.join(tmp, "job.json"),
                              "--listen", f"127.0.0.1:{port}", "--token-file",
                              os.path.join(tmp, "token")], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while (time.monotonic() < deadline and coord.poll() is None
               and "serving on" not in open(log.name).read()):
            time.sleep(0.1)
        serving = "serving on" in open(log.name).read()
        check(serving, "bad-join: gradex-coordinator serving: " + open(log.name).read()[-300:],
              failures)
        if not serving:
            return
        # Each error names its fix (README, "Troubleshooting").
        for what, target, words in (
                ("wrong token", f"127.0.0.1:{port}", ["token", "Fix:", "GRADEX_TOKEN"]),
                ("unreachable coordinator", f"127.0.0.1:{free_port()}",
                 ["no coordinator", "Fix:", "GRADEX_COORDINATOR"]),
                ("GradexState before init_process_group", "none",
                 ["init_process_group() before gradex.torch.GradexState", "GRADEX_COORDINATOR"]),
                ("another algorithm than the job config's", f"plan:127.0.0.1:{port}",
                 ["algorithm: this rank asks oktopk (keyword algorithm), the plan has spardl",
                  f"the job config of the coordinator at 127.0.0.1:{port}",
                  "allow_plan_override=True"]),
                ("the same, allow_plan_override=True", f"plan-allowed:127.0.0.1:{port}", [])):
            env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1")
            env.pop("GRADEX_COORDINATOR", None)
            t0 = time.monotonic()
            try:
                done = subprocess.run([sys.executable, os.path.abspath(__file__), "--phase",
                                       "bad-join", "--target", target], env=env,
                                      capture_output=True, text=True, timeout=60)
                out, err = done.stdout, done.stderr
            except subprocess.TimeoutExpired:
                out = err = ""
            took = time.monotonic() - t0
            r = next((json.loads(l[7:]) for l in out.splitlines() if l.startswith("RESULT ")), {})
            print(f"--- bad-join, {what}: {took:.1f} s, {json.dumps(r)}")
            missing = [w for w in words if w not in r.get("error", "")]
            check(not missing,
                  f"bad-join: {what} raises GradexError naming {words} (missing {missing}): "
                  f"{r.get('error', out[-300:])[:400]!r}", failures)
            check(r.get("error_s", 1e9) <= r.get("timeout_s", 0) + 5,
                  f"bad-join: {what} within timeout_s + 5 s ({r.get('error_s')} s)", failures)
            if not words:  # allowed: joins, warns once naming the option
                check(r.get("error") == "" and err.count("gradex: warning: algorithm") == 1,
                      f"bad-join: {what} joins and warns once: {r.get('error')!r}, "
                      f"{err[-300:]!r}", failures)
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        try:
            busy = subprocess.run([args.coordinator_bin, "--job-config", os.path.join(tmp, "job.json"),
                                   "--listen", "127.0.0.1:0", "--metrics-port",
                                   str(held.getsockname()[1])], capture_output=True, text=True,
                                  timeout=30)
        finally:
            held.close()
        err = busy.stdout + busy.stderr
        print(f"--- bad-join, metrics port in use: rc {busy.returncode}: {err.strip()[-300:]}")
        check(busy.returncode != 0 and "cannot listen on" in err and "Fix:" in err
              and "--metrics-port" in err,
              f"bad-join: a metrics port in use fails naming the fix: {err[-300:]!r}", failures)
    finally:
        coord.terminate()
        coord.wait(timeout=10)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


# ---- the launcher -----------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_phase(args, phase, world=2):
    env = dict(os.environ, WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), LOCAL_WORLD_SIZE=str(world))
    cmd = [sys.executable, os.path.abspath(__file__), "--phase", phase,
           "--algorithm", args.algorithm, "--steps", str(args.steps),
           "--cuda-device", args.cuda_device]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    t0 = time.monotonic()
    outs, hung = [], False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, args.phase_timeout_s - (time.monotonic() - t0)))
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
    return results, outs, [p.returncode for p in procs], hung, time.monotonic() - t0


def no_cuda(args):
    """Why the cuda phase cannot run here ('' when it can)."""
    if args.cuda_device == "cpu":
        return ""
    import torch
    if not torch.backends.cuda.is_built():
        return f"torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"
    return ""


def check_cuda(args, results, failures):
    check(len(results) == 2, "cuda: both ranks finished", failures)
    if len(results) != 2:
        return
    a, b = results[0], results[1]
    gpu = args.cuda_device == "cuda"
    print(f"--- cuda: {a.get('device')} ({a.get('gpu', 'no GPU')}), torch {a.get('torch')}, "
          f"algorithm {a.get('algorithm')}")
    for values in [v for v in ("integers", "gaussian", "side-stream") if v in a]:
        for r in (a, b):
            v = r[values]
            print(f"--- cuda, {values}, rank {r['rank']}: device paths {v['device_paths']}; "
                  f"bytes down/up/elements {v['bytes_down_up']}")
        va, vb = a[values], b[values]
        check(va["n_results_differ"] == 0 and vb["n_results_differ"] == 0,
              f"cuda, {values}: every step's results bitwise equal to the CPU run's "
              f"({va['steps']} steps; differ: {va['results_differ'] or vb['results_differ']})",
              failures)
        check(not va["state_differ"] and not vb["state_differ"],
              f"cuda, {values}: residuals and velocities (state_dict) bitwise equal to the CPU "
              f"run's ({va['state_differ'] or vb['state_differ'] or 'equal'})", failures)
        check(va["velocity_nonzero"] > 0 and va["dense_steps"] > 0,
              f"cuda, {values}: velocities exercised ({va['velocity_nonzero']} non-zero) and "
              f"dense steps ran ({va['dense_steps']} steps: start_iter)", failures)
        check(va["on_device"] and vb["on_device"],
              f"cuda, {values}: the hook's results stay on the bucket's device", failures)
        check(not va["host_paths_bad"] and not vb["host_paths_bad"],
              f"cuda, {values}: stats() device_path 'host' for CPU buckets "
              f"{va['host_paths_bad'] or vb['host_paths_bad']}", failures)
        check(not va["device_paths_bad"] and not vb["device_paths_bad"],
              f"cuda, {values}: stats() device_path as Select decides for CUDA buckets "
              f"({va['device_selected']} device selections; wrong: "
              f"{va['device_paths_bad'] or vb['device_paths_bad'] or 'none'}; "
              "'whole-bucket staging' everywhere: gradex built without CUDA?)", failures)
        if gpu and args.algorithm in ("spardl", "spardl-rsag", "spardl-bsag"):
            check(va["device_selected"] > 0,
                  f"cuda, {values}: the device path ran ({va['device_selected']} buckets)",
                  failures)
        check(va["digest"] == vb["digest"], f"cuda, {values}: results identical on both ranks",
              failures)
    da, db = a["ddp"], b["ddp"]
    print(f"--- cuda, DDP: {da['layouts']} bucket layouts, device paths {da['device_paths']}")
    check(da["exact"] and db["exact"],
          "cuda, DDP: the float64 run ends with the float32 run's parameters (every step exact)",
          failures)
    check(da["moved"], "cuda, DDP: the parameters moved", failures)
    check(da["params_equal"] and db["params_equal"],
          "cuda, DDP: final parameters bitwise equal to the CPU run's", failures)
    check(not da["state_differ"] and not db["state_differ"],
          f"cuda, DDP: residuals and velocities bitwise equal to the CPU run's "
          f"({da['state_differ'] or db['state_differ'] or 'equal'})", failures)
    check(da["layouts"] >= 2, f"cuda, DDP: the reducer's rebuild changed the bucket layout "
          f"({da['layouts']} layouts)", failures)
    check(not da["host_paths_bad"] and not da["device_paths_bad"] and not db["device_paths_bad"],
          f"cuda, DDP: stats() device_path as expected ({da['device_selected']} device "
          f"selections; wrong: {da['host_paths_bad'] or da['device_paths_bad'] or 'none'})",
          failures)
    check(da["digest"] == db["digest"], "cuda, DDP: parameters identical on both ranks", failures)


def check_handover(results, failures):
    check(len(results) == 2, "handover: both ranks finished", failures)
    if len(results) != 2:
        return
    a, b = results[0], results[1]
    print(f"--- handover: {a['line']!r}; weight decay: {a['decay_line']!r}; "
          f"Adam: {a['adam_line']!r}; Nesterov: {a['nesterov_line']!r}")
    for r in (a, b):
        check(r["exact"] and r["velocity_exact"] and r["moved"],
              f"handover, rank {r['rank']}: parameters and velocities bitwise equal to the "
              f"hand-written momentum_correction=0.9 (moved: {r['moved']})", failures)
        check(r["decay_exact"],
              f"handover, rank {r['rank']}: weight decay moved with it, bitwise equal to "
              "wd * w added by hand before the hook", failures)
        check(r["resumed_exact"],
              f"handover, rank {r['rank']}: both state_dicts resume the run bitwise", failures)
    check(a["during"] == [[0, 0]] and a["restored"] == [[0.9, 0]],
          f"handover: the optimizer's momentum is 0 while handed over ({a['during']}) and 0.9 "
          f"after close() ({a['restored']})", failures)
    check(a["decay_during"] == [[0, 0]] and a["decay_restored"] == [[0.9, 0.01]],
          f"handover: weight decay 0 while handed over ({a['decay_during']}), back after "
          f"close() ({a['decay_restored']})", failures)
    check("momentum 0.9 moved into the hook" in a["line"] and "no dense probes" in a["line"],
          f"handover: the line says what moved: {a['line']!r}", failures)
    check("weight decay 0.01" in a["decay_line"], f"handover: {a['decay_line']!r}", failures)
    check(a["resumed_momentum"] == 0 and a["closed_momentum"] == 0.9,
          "handover: a resumed run's optimizer is handed over too, and given back", failures)
    check("build GradexState(optimizer=opt)" in a["mismatch_error"],
          f"handover: a checkpoint of a handed-over run refused without the hand-over: "
          f"{a['mismatch_error'][:200]!r}", failures)
    check(a["adam_unchanged"] and b["adam_unchanged"] and a["adam_mc"] == 0,
          "handover: Adam's settings unchanged, no momentum correction", failures)
    check(len(a["adam_warnings"]) == 1 and "Adam" in a["adam_warnings"][0]
          and a["adam_warnings"][0] == "gradex: " + a["adam_line"] and not b["adam_warnings"],
          f"handover: Adam warned once, on rank 0, saying what it gets: {a['adam_warnings']}",
          failures)
    check("nesterov=True run as plain (heavy-ball) momentum correction" in a["nesterov_line"]
          and a["nesterov_mc"] == 0.9, f"handover: Nesterov says so: {a['nesterov_line']!r}",
          failures)
    check("not both" in a["both_error"], f"handover: optimizer= with momentum_correction= "
          f"refused: {a['both_error']!r}", failures)


def check(cond, what, failures):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def main():
    args = parse_args()
    if "RANK" in os.environ:  # a rank process
        import torch_hook_ranks as ranks
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        {"conservation": ranks.conservation, "momentum": ranks.momentum, "cuda": ranks.cuda,
         "train": ranks.train, "handover": ranks.handover,
         "dead-rank": ranks.dead_rank, "bad-join": ranks.bad_join}[args.phase](args, rank, world)
        return 0
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"torch_hook_test: SKIP ({sys.executable} has no torch; install python3-torch)")
        return SKIP
    try:
        import gradex.torch  # noqa: F401
    except ImportError as e:
        if args.expect_module == "OFF":
            print(f"torch_hook_test: SKIP (the gradex module was not built: {e})")
            return SKIP
        print(f"torch_hook_test: cannot import gradex.torch: {e}")
        return 1
    failures = []
    phases = (["bad-join", "conservation", "momentum", "cuda", "train", "dead-rank"]
              if args.phase == "all" else [args.phase])
    for phase in phases:
        if phase == "bad-join":
            run_bad_join(args, failures)
            continue
        if phase == "cuda":
            why = no_cuda(args)
            if why:
                print(f"cuda: SKIP ({why}); passes inside --phase all", flush=True)
                if args.phase == "cuda":
                    return SKIP
                continue
        results, outs, rcs, hung, took = run_phase(args, phase)
        print(f"--- {phase}: {took:.1f} s, exit codes {rcs}, results {json.dumps(results)}", flush=True)
        ok_procs = not hung and (phase == "dead-rank" or rcs == [0, 0])
        if not ok_procs or len(results) < (1 if phase == "dead-rank" else 2):
            for r, out in enumerate(outs):
                print(f"--- rank {r} output (last 40 lines):\n" + "\n".join(out.splitlines()[-40:]))
        check(not hung, f"{phase}: no rank hung (limit {args.phase_timeout_s} s)", failures)
        if phase == "conservation":
            check(len(results) == 2, "conservation: both ranks finished", failures)
            if len(results) == 2:
                a, b = results[0], results[1]
                check(max(a["residual_max"], b["residual_max"]) == 0,
                      "conservation: every residual drained to 0 by the zero steps", failures)
                check(a["conservation_max_abs_err"] == 0 and b["conservation_max_abs_err"] == 0,
                      "conservation: sum of P*result == sum of every rank's gradients, exactly",
                      failures)
                check(a["digest"] == b["digest"], "conservation: results identical on both ranks",
                      failures)
                check("GradexError" in a["nan_error"] and "INVALID_ARGUMENT" in a["nan_error"],
                      f"NaN refused on the rank that had it: {a['nan_error'][:200]!r}", failures)
                check(not b["nan_error"] and a["nan_finite"] and b["nan_finite"]
                      and a["nan_digest"] == b["nan_digest"],
                      "NaN: the other rank succeeds, both get the same finite result", failures)
                check(a["f64_dtype"] == "torch.float64" and a["f64_warned"],
                      "float64 bucket converted (and warned)", failures)
                check("dtype torch.int32" in a["int_refused"], "int32 bucket refused with TypeError",
                      failures)
                check("closed" in a["closed_error"], "a closed state raises GradexError", failures)
        elif phase == "momentum":
            check(len(results) == 2, "momentum: both ranks finished", failures)
            if len(results) == 2:
                a, b = results[0], results[1]
                check("momentum_correction" in a["bad_m"],
                      f"momentum_correction=1.0 refused: {a['bad_m']!r}", failures)
                check(a["conservation_max_abs_err"] == 0 and b["conservation_max_abs_err"] == 0,
                      "momentum: sum of velocities fed == sum of P*result + residuals, exactly",
                      failures)
                check(a["velocity_roundtrip"] and b["velocity_roundtrip"],
                      "momentum: state_dict -> load_state_dict keeps the velocities", failures)
                check(a["velocity_same"] and b["velocity_same"],
                      "momentum: the hook's velocities equal the masked float64 reference",
                      failures)
                check(a["masked"] > 0 and a["fed_norm"] > 0,
                      f"momentum: factor masking applied ({a['masked']} entries)", failures)
                check(a["digest"] == b["digest"], "momentum: results identical on both ranks",
                      failures)
        elif phase == "cuda":
            check_cuda(args, results, failures)
        elif phase == "handover":
            check_handover(results, failures)
        elif phase == "train":
            check(len(results) == 2, "train: both ranks finished", failures)
            if len(results) == 2:
                check(results[0]["test_acc"] > args.min_accuracy,
                      f"train: test accuracy {results[0]['test_acc']} > {args.min_accuracy}", failures)
                check(results[0]["identical"] and results[1]["identical"],
                      "train: parameters bitwise identical on both ranks", failures)
                check(results[0]["calls"] > 0 and results[0]["calls"] > results[0]["dense_calls"],
                      "train: buckets went through gradex, mostly sparse", failures)
        else:
            r0 = results.get(0, {})
            check(rcs[1] == 5, "dead-rank: rank 1 died as scripted", failures)
            check(bool(r0.get("error")) and "gradex" in r0.get("error", ""),
                  f"dead-rank: survivor's backward raised a gradex error: {r0.get('error', '')[:300]!r}",
                  failures)
            check(r0.get("error_s", 1e9) <= r0.get("timeout_s", 0) + 5,
                  f"dead-rank: within timeout_s + 5 s ({r0.get('error_s')} s)", failures)
    print("torch_hook_test: " + ("PASS" if not failures else f"FAIL ({len(failures)})"))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
