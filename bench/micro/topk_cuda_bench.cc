// gradex-topk-cuda-bench: the GPU top-k timed against the device's own copy.
// For n in --sizes (millions) and densities 0.01 / 0.001, medians over
// --reps of CUDA-event times for:
//   copy     cudaMemcpy device to device of n floats (read + write);
//   select   cuda::SelectTopK of a gaussian x;
//   acc+sel  the accumulation as its own call, then SelectTopKAndZero;
//   fused    cuda::SelectTopKStep with the accumulation in pass 1;
//   reuse    the same with threshold reuse (steps alternate two gradients
//            over a residual of sigma 10, as gradex-kernels-bench's BM_Step).
// torch.topk is timed by topk_torch_bench.py beside this file, on the same
// sizes. Runs on a GPU machine (../shared/gpu/README.md); prints a table.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/sparse_cuda.h"
#include "kernels/topk_step.h"

namespace {

using gradex::kernels::Accumulate;
using gradex::kernels::ThresholdReuse;
namespace cuda = gradex::kernels::cuda;

#define CHECK(expr)                                                                               \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Median milliseconds of `reps` runs of f() on stream 0, after one warm-up.
template <typename F>
double TimeMs(int reps, F f) {
  Timer t;
  f();
  CHECK(cudaDeviceSynchronize());
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK(cudaEventRecord(t.a, 0));
    f();
    CHECK(cudaEventRecord(t.b, 0));
    CHECK(cudaEventSynchronize(t.b));
    float m = 0;
    CHECK(cudaEventElapsedTime(&m, t.a, t.b));
    ms.push_back(m);
  }
  return Median(ms);
}

std::vector<float> Gauss(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (float& f : v) f = g(rng);
  return v;
}

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

float* Upload(const std::vector<float>& v) {
  float* d = DeviceAlloc<float>(v.size());
  CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

void Usage() {
  std::printf(
      "usage: gradex-topk-cuda-bench [--sizes 1,10,25.6,105] [--reps 20]\n"
      "Times the GPU top-k (select, accumulate+select, fused, threshold reuse) against a\n"
      "device-to-device copy, at densities 0.01 and 0.001; sizes in millions of floats.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> sizes = {1, 10, 25.6, 105};
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string s = argv[++i];
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        sizes.push_back(std::atof(s.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "gradex-topk-cuda-bench: unknown argument '%s' (see --help)\n",
                   a.c_str());
      return 2;
    }
  }
  int dev = 0;
  if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
    std::fprintf(stderr, "gradex-topk-cuda-bench: no CUDA device; run it on a GPU machine\n");
    return 1;
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, reps %d, medians in ms; GB/s counts n*4 bytes of input\n", prop.name,
              reps);
  std::printf("%8s %7s %8s %8s %8s %8s %8s %8s %10s\n", "n_M", "density", "copy", "select",
              "acc+sel", "fused", "reuse", "hits", "reuse_GB/s");
  for (double sm : sizes) {
    const size_t n = static_cast<size_t>(sm * 1e6);
    const std::vector<float> h_x = Gauss(n, 1, 1.0f);
    const std::vector<float> h_g0 = Gauss(n, 2, 1.0f), h_g1 = Gauss(n, 3, 1.33f);
    const std::vector<float> h_r = Gauss(n, 4, 10.0f);
    float* x = Upload(h_x);
    float* g[2] = {Upload(h_g0), Upload(h_g1)};
    float* r = Upload(h_r);
    float* copy = DeviceAlloc<float>(n);
    for (double d : {0.01, 0.001}) {
      const size_t k = static_cast<size_t>(static_cast<double>(n) * d);
      uint32_t* idx = DeviceAlloc<uint32_t>(k);
      float* val = DeviceAlloc<float>(k);
      cuda::Workspace ws;
      const double t_copy = TimeMs(reps, [&] {
        CHECK(cudaMemcpyAsync(copy, x, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
      });
      const double t_sel = TimeMs(
          reps, [&] { CHECK(cuda::SelectTopK(x, n, k, 0, idx, val, nullptr, nullptr, &ws, 0)); });
      // Each of the step variants runs its own residual from the same start.
      size_t step = 0;
      CHECK(cudaMemcpy(copy, r, n * sizeof(float), cudaMemcpyDeviceToDevice));
      const double t_unfused = TimeMs(reps, [&] {
        Accumulate a{g[step++ % 2]};
        CHECK(cuda::SelectTopKStep(copy, n, 0, 0, &a, nullptr, false, idx, val, nullptr, nullptr,
                                   &ws, 0));  // k = 0: the accumulation alone
        CHECK(cuda::SelectTopKAndZero(copy, n, k, 0, idx, val, nullptr, nullptr, &ws, 0));
      });
      step = 0;
      CHECK(cudaMemcpy(copy, r, n * sizeof(float), cudaMemcpyDeviceToDevice));
      const double t_fused = TimeMs(reps, [&] {
        Accumulate a{g[step++ % 2]};
        CHECK(cuda::SelectTopKStep(copy, n, k, 0, &a, nullptr, true, idx, val, nullptr, nullptr,
                                   &ws, 0));
      });
      step = 0;
      CHECK(cudaMemcpy(copy, r, n * sizeof(float), cudaMemcpyDeviceToDevice));
      ThresholdReuse reuse;
      const double t_reuse = TimeMs(reps, [&] {
        Accumulate a{g[step++ % 2]};
        CHECK(cuda::SelectTopKStep(copy, n, k, 0, &a, &reuse, true, idx, val, nullptr, nullptr, &ws,
                                   0));
      });
      std::printf("%8.1f %7.3f %8.3f %8.3f %8.3f %8.3f %8.3f %3llu/%-4llu %10.0f\n", sm, d, t_copy,
                  t_sel, t_unfused, t_fused, t_reuse, static_cast<unsigned long long>(reuse.hits),
                  static_cast<unsigned long long>(reuse.steps),
                  static_cast<double>(n) * 4 / (t_reuse * 1e6));
      CHECK(cudaFree(idx));
      CHECK(cudaFree(val));
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(g[0]));
    CHECK(cudaFree(g[1]));
    CHECK(cudaFree(r));
    CHECK(cudaFree(copy));
  }
  return 0;
}
