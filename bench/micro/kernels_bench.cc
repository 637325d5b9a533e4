// Microbenchmarks of the CPU kernels at gradex's working sizes: a 25M-float
// (100 MB) bucket at density 0.01 / 0.001, and COO runs of 250K entries; the
// error-feedback step kernels from 1M to 100M.
// Bytes/s counts the dense input for dense kernels and the COO input (8 bytes
// an entry) for sparse ones.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "kernels/sparse.h"
#include "kernels/topk_step.h"
#include "version/version.h"

namespace gradex::kernels {
namespace {

constexpr size_t kN = 25'000'000;

const std::vector<float>& Gauss() {
  static const std::vector<float> x = [] {
    std::mt19937 rng(1);
    std::normal_distribution<float> g;
    std::vector<float> v(kN);
    for (float& f : v) f = g(rng);
    return v;
  }();
  return x;
}

// Few distinct values: the k-th largest sits in a bucket holding 2/7 of n.
const std::vector<float>& Ties() {
  static const std::vector<float> x = [] {
    std::mt19937 rng(3);
    std::vector<float> v(kN);
    for (float& f : v) f = static_cast<float>(static_cast<int>(rng() % 7) - 3);
    return v;
  }();
  return x;
}

const std::vector<float>& Uniform() {
  static const std::vector<float> x = [] {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(kN);
    for (float& f : v) f = u(rng);
    return v;
  }();
  return x;
}

SparseVec RandomRun(size_t universe, size_t nnz, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> dense(universe, 0.0f);
  for (size_t i = 0; i < nnz;) {
    const size_t j = rng() % universe;
    if (dense[j] == 0.0f) {
      dense[j] = g(rng);
      ++i;
    }
  }
  SparseVec s;
  DenseToSparse(dense.data(), universe, 0, &s);
  return s;
}

// Args: density in parts per 10000; input 0 gaussian, 1 uniform, 2 ties.
void BM_SelectTopK(benchmark::State& state) {
  const std::vector<float>& x =
      state.range(1) == 0 ? Gauss() : (state.range(1) == 1 ? Uniform() : Ties());
  const size_t k = kN * state.range(0) / 10000;
  SparseVec out;
  out.idx.reserve(k);
  out.val.reserve(k);
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(SelectTopK(x.data(), kN, k, 0, &out));
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_SelectTopK)
    ->ArgNames({"dens_e4", "input"})
    ->Args({100, 0})
    ->Args({10, 0})
    ->Args({100, 1})
    ->Args({100, 2})
    ->Unit(benchmark::kMillisecond);

void BM_FindTopKThreshold(benchmark::State& state) {
  const std::vector<float>& x = Gauss();
  const size_t k = kN * state.range(0) / 10000;
  for (auto _ : state) benchmark::DoNotOptimize(FindTopKThreshold(x.data(), kN, k));
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_FindTopKThreshold)->ArgName("dens_e4")->Arg(100)->Unit(benchmark::kMillisecond);

void BM_SelectTopKAndZero(benchmark::State& state) {
  std::vector<float> x = Gauss();
  const size_t k = kN / 100;
  SparseVec out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(SelectTopKAndZero(x.data(), kN, k, 0, &out));
    state.PauseTiming();
    ScatterAdd(View(out), 0, 1.0f, x.data());  // put the selection back
    state.ResumeTiming();
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_SelectTopKAndZero)->Unit(benchmark::kMillisecond);

// Args: blocks, zero_selected. Density 0.01 overall.
void BM_BlockTopK(benchmark::State& state) {
  std::vector<float> x = Gauss();
  const size_t blocks = state.range(0);
  const bool zero = state.range(1) != 0;
  std::vector<size_t> bounds(blocks + 1), k(blocks);
  for (size_t b = 0; b <= blocks; ++b) bounds[b] = kN * b / blocks;
  for (size_t b = 0; b < blocks; ++b) k[b] = (bounds[b + 1] - bounds[b]) / 100;
  std::vector<SparseVec> out;
  for (auto _ : state) {
    BlockTopK(x.data(), bounds, k, 0, zero, &out);
    if (zero) {
      state.PauseTiming();
      for (const SparseVec& s : out) ScatterAdd(View(s), 0, 1.0f, x.data());
      state.ResumeTiming();
    }
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_BlockTopK)
    ->ArgNames({"blocks", "zero"})
    ->Args({4, 0})
    ->Args({9, 0})
    ->Args({4, 1})
    ->Unit(benchmark::kMillisecond);

void BM_MergeAdd(benchmark::State& state) {
  const size_t nnz = state.range(0);
  const SparseVec a = RandomRun(kN, nnz, 3), b = RandomRun(kN, nnz, 4);
  SparseVec out;
  for (auto _ : state) {
    MergeAdd(View(a), View(b), &out);
    benchmark::DoNotOptimize(out.idx.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * nnz * 8);
}
BENCHMARK(BM_MergeAdd)->Arg(250'000)->Unit(benchmark::kMicrosecond);

void BM_ScatterAdd(benchmark::State& state) {
  const size_t nnz = state.range(0);
  const SparseVec s = RandomRun(kN, nnz, 5);
  std::vector<float> dense(kN, 0.0f);
  for (auto _ : state) {
    ScatterAdd(View(s), 0, 1.0f, dense.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * nnz * 8);
}
BENCHMARK(BM_ScatterAdd)->Arg(250'000)->Unit(benchmark::kMicrosecond);

// Arg: density in parts per 10000 of a dense span that is mostly zero.
void BM_DenseToSparse(benchmark::State& state) {
  const size_t nnz = kN * state.range(0) / 10000;
  const SparseVec s = RandomRun(kN, nnz, 6);
  std::vector<float> dense(kN);
  SparseToDense(View(s), 0, dense.data(), kN);
  SparseVec out;
  for (auto _ : state) {
    DenseToSparse(dense.data(), kN, 0, &out);
    benchmark::DoNotOptimize(out.idx.data());
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_DenseToSparse)->ArgName("dens_e4")->Arg(100)->Unit(benchmark::kMillisecond);

void BM_CompactAbove(benchmark::State& state) {
  const std::vector<float>& x = Gauss();
  SparseVec out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(CompactAbove(x.data(), kN, 2.576f, 0, &out));  // ~1%
  }
  state.SetBytesProcessed(state.iterations() * kN * sizeof(float));
}
BENCHMARK(BM_CompactAbove)->Unit(benchmark::kMillisecond);

// ---- Error-feedback steps: accumulate + select + zero -----------------------
// One step of a bucket of n: x += g (or with DGC momentum: u = 0.9u + g;
// x += u), then the top-k of x is taken and zeroed. x starts as a residual
// in its steady state would be, much wider than one gradient (an entry waits
// about 1/density steps to be sent): gaussian with sigma 10. Two gaussian
// gradients (sigma 1 and 1.33) alternate, so the k-th magnitude drifts from
// step to step. The same sequence for every variant:
//   mode 0 "before": the accumulation as its own pass, then SelectTopKAndZero;
//   mode 1 "fused":  SelectTopKStep with the accumulation in its first pass;
//   mode 2 "reuse":  the same plus the last step's threshold.
// Args: n in millions, density in parts per 10000, momentum 0/1, mode.

struct StepInputs {
  std::vector<float> g[2];
  std::vector<float> x0;
};

const StepInputs& Inputs(size_t n) {
  static std::map<size_t, std::unique_ptr<StepInputs>> cache;
  auto& p = cache[n];
  if (!p) {
    p = std::make_unique<StepInputs>();
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> g;
    for (int j = 0; j < 2; ++j) {
      p->g[j].resize(n);
      const float scale = j == 0 ? 1.0f : 1.33f;
      for (float& f : p->g[j]) f = g(rng) * scale;
    }
    p->x0.resize(n);
    for (float& f : p->x0) f = g(rng) * 10.0f;
  }
  return *p;
}

void BM_Step(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * 1'000'000;
  const size_t k = n * state.range(1) / 10000;
  const bool momentum = state.range(2) != 0;
  const int mode = static_cast<int>(state.range(3));
  const StepInputs& in = Inputs(n);
  std::vector<float> x = in.x0, u(momentum ? n : 0, 0.0f);
  if (momentum) {
    // The velocity's steady 2-cycle under the alternating gradients, and a
    // residual as much wider as the velocity is than one gradient.
    for (size_t i = 0; i < n; ++i) {
      u[i] = (in.g[1][i] + 0.9f * in.g[0][i]) / 0.19f;
      x[i] *= 10.0f;
    }
  }
  ThresholdReuse reuse;
  SparseVec out;
  out.idx.reserve(k + 64);
  out.val.reserve(k + 64);
  size_t step = 0;
  auto run = [&] {
    const float* g = in.g[step++ % 2].data();
    out.clear();
    size_t nonfinite = 0;  // the call frame's residual rule counts them either way
    if (mode == 0) {
      // The accumulation as a pass of its own (as the call frame did before
      // it left it to the local part), then the selection.
      if (momentum) {
        for (size_t i = 0; i < n; ++i) {
          u[i] = u[i] * 0.9f + g[i];
          x[i] += u[i];
          nonfinite += !std::isfinite(x[i]);
        }
      } else {
        for (size_t i = 0; i < n; ++i) {
          x[i] += g[i];
          nonfinite += !std::isfinite(x[i]);
        }
      }
      benchmark::DoNotOptimize(SelectTopKAndZero(x.data(), n, k, 0, &out));
    } else {
      const Accumulate a{g, momentum ? u.data() : nullptr, 0.9f};
      benchmark::DoNotOptimize(SelectTopKStep(x.data(), n, k, 0, &a, mode == 2 ? &reuse : nullptr,
                                              true, &out, &nonfinite));
    }
    benchmark::DoNotOptimize(nonfinite);
  };
  // Untimed first steps: the reuse state gets its prediction (the first step
  // of a bucket always runs the full select), and every variant starts the
  // timed steps from the same residual.
  for (int i = 0; i < 3; ++i) run();
  const uint64_t hits0 = reuse.hits, misses0 = reuse.misses();
  for (auto _ : state) run();
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
  if (mode == 2) {
    state.counters["hits"] = static_cast<double>(reuse.hits - hits0);
    state.counters["misses"] = static_cast<double>(reuse.misses() - misses0);
    state.counters["cand_per_k"] = static_cast<double>(reuse.last_candidates) / k;
  }
}
BENCHMARK(BM_Step)
    ->ArgNames({"n_M", "dens_e4", "mom", "mode"})
    ->ArgsProduct({{1, 10, 25, 100}, {100, 10}, {0}, {0, 1, 2}})
    ->ArgsProduct({{25}, {100, 10}, {1}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond);

// Selection alone (no accumulation, nothing zeroed) of the same x every
// step, with and without threshold reuse: the reuse path's best case, and
// what a fully drifting step costs when it hits. Args: n in millions,
// density in parts per 10000, reuse 0/1.
void BM_SelectReuse(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0)) * 1'000'000;
  const size_t k = n * state.range(1) / 10000;
  const bool use = state.range(2) != 0;
  std::vector<float> x = Inputs(n).g[0];
  ThresholdReuse reuse;
  SparseVec out;
  SelectTopKStep(x.data(), n, k, 0, nullptr, &reuse, false, &out);  // the first prediction
  for (auto _ : state) {
    out.clear();
    if (use) {
      benchmark::DoNotOptimize(SelectTopKStep(x.data(), n, k, 0, nullptr, &reuse, false, &out));
    } else {
      benchmark::DoNotOptimize(SelectTopK(x.data(), n, k, 0, &out));
    }
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
}
BENCHMARK(BM_SelectReuse)
    ->ArgNames({"n_M", "dens_e4", "reuse"})
    ->ArgsProduct({{1, 10, 25, 100}, {100, 10}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gradex::kernels

// BENCHMARK_MAIN, with --version first (the library would refuse it).
int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-kernels-bench")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
