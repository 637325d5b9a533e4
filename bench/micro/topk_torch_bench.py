"""torch.topk(|x|) and a device copy on the GPU, at the sizes and densities
of gradex-topk-cuda-bench, so that the two tables sit side by side.

Run on a GPU machine with PyTorch: python3 bench/micro/topk_torch_bench.py
[--sizes 1,10,25.6,105] [--reps 20]. Medians of CUDA-event times in ms.
"""
import argparse
import statistics

import torch


def time_ms(reps, fn):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,25.6,105", help="millions of floats, comma-separated")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("topk_torch_bench: no CUDA device; run it on a GPU machine")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"reps {args.reps}, medians in ms")
    print(f"{'n_M':>8} {'density':>7} {'copy':>8} {'topk_abs':>9} {'topk_GB/s':>10}")
    gen = torch.Generator(device="cuda").manual_seed(1)
    for sm in (float(s) for s in args.sizes.split(",")):
        n = int(sm * 1e6)
        x = torch.randn(n, device="cuda", generator=gen)
        out = torch.empty_like(x)
        for d in (0.01, 0.001):
            k = int(n * d)
            t_copy = time_ms(args.reps, lambda: out.copy_(x))
            t_topk = time_ms(args.reps, lambda: torch.topk(x.abs(), k, sorted=False))
            print(f"{sm:8.1f} {d:7.3f} {t_copy:8.3f} {t_topk:9.3f} {n * 4 / (t_topk * 1e6):10.0f}")


if __name__ == "__main__":
    main()
