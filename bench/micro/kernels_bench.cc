// Microbenchmarks of the CPU kernels at gradex's working sizes: a 25M-float
// (100 MB) bucket at density 0.01 / 0.001, and COO runs of 250K entries.
// Bytes/s counts the dense input for dense kernels and the COO input (8 bytes
// an entry) for sparse ones.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/sparse.h"
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

}  // namespace
}  // namespace gradex::kernels

// BENCHMARK_MAIN, with --version first (the library would refuse it).
int main(int argc, char** argv) {
  if (gradex::PrintVersionIfAsked(argc, argv, "gradex-kernels-bench")) return 0;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
