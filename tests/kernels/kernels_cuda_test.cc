// GPU kernels against the CPU kernels, bit for bit. Skips where no CUDA
// device is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/sparse_cuda.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"
#include "tests/cuda_device.h"
#include "tests/kernels/reference.h"

namespace gradex::kernels {
namespace {

using testing::AllDists;
using testing::Bits;
using testing::Dist;
using testing::Make;
using testing::SameBits;

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << cudaGetErrorString(expr)

// A device copy of a host vector, freed at scope exit.
template <typename T>
class DeviceVec {
 public:
  explicit DeviceVec(size_t n) : n_(n) {
    if (n > 0) err_ = cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T));
  }
  explicit DeviceVec(const std::vector<T>& v) : DeviceVec(v.size()) {
    if (!v.empty() && err_ == cudaSuccess) {
      err_ = cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
  }
  ~DeviceVec() {
    if (p_) cudaFree(p_);
  }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  T* get() const { return p_; }
  cudaError_t error() const { return err_; }
  std::vector<T> Host(size_t count) const {
    std::vector<T> v(count);
    if (count > 0) cudaMemcpy(v.data(), p_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
  cudaError_t err_ = cudaSuccess;
};

SparseVec Coo(std::vector<uint32_t> idx, std::vector<float> val) {
  SparseVec s;
  s.idx = std::move(idx);
  s.val = std::move(val);
  return s;
}

std::string Where(Dist d, size_t n, size_t k) {
  return std::string(testing::Name(d)) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

TEST(CudaTopK, SelectMatchesCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{4096}, size_t{4097}, size_t{100003},
                     size_t{1000000}}) {
      const std::vector<float> x = Make(d, n, static_cast<uint32_t>(n + 3));
      DeviceVec<float> dx(x);
      ASSERT_CUDA(dx.error());
      for (size_t k : {size_t{0}, size_t{1}, n / 100, n / 2, n, n + 7}) {
        const size_t cap = std::max<size_t>(1, std::min(k, n));
        DeviceVec<uint32_t> di(cap);
        DeviceVec<float> dv(cap);
        size_t count = 0;
        ASSERT_CUDA(
            cuda::SelectTopK(dx.get(), n, k, 9, di.get(), dv.get(), nullptr, &count, &ws, 0));
        SparseVec want;
        SelectTopK(x.data(), n, k, 9, &want);
        ASSERT_EQ(count, want.nnz()) << Where(d, n, k);
        ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), want)) << Where(d, n, k);

        // The threshold alone matches too.
        DeviceVec<cuda::DeviceThreshold> dt(1);
        ASSERT_CUDA(cuda::FindTopKThreshold(dx.get(), n, k, dt.get(), &ws, 0));
        const cuda::DeviceThreshold t = dt.Host(1)[0];
        const TopKThreshold c = FindTopKThreshold(x.data(), n, k);
        ASSERT_EQ(t.threshold_key, c.threshold_key) << Where(d, n, k);
        ASSERT_EQ(t.take_at_threshold, c.take_at_threshold) << Where(d, n, k);
        ASSERT_EQ(t.count_above, c.count_above) << Where(d, n, k);
      }
    }
  }
}

TEST(CudaTopK, SelectAndZeroLeavesTheCpuResidual) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  const size_t n = 300000, k = 3000;
  std::vector<float> x = Make(Dist::kTies, n, 5);
  DeviceVec<float> dx(x);
  DeviceVec<uint32_t> di(k);
  DeviceVec<float> dv(k);
  size_t count = 0;
  ASSERT_CUDA(
      cuda::SelectTopKAndZero(dx.get(), n, k, 0, di.get(), dv.get(), nullptr, &count, &ws, 0));
  SparseVec want;
  SelectTopKAndZero(x.data(), n, k, 0, &want);
  ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), want));
  const std::vector<float> y = dx.Host(n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(x[i])) << i;
}

TEST(CudaTopK, BlockTopKMatchesCpuWithEmptyBlocks) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  const size_t n = 200003;
  std::vector<float> x = Make(Dist::kGauss, n, 8);
  const std::vector<size_t> bounds = {0, 0, 50000, 50000, 120000, n};
  const std::vector<size_t> k = {3, 500, 0, 70000, 2000};
  for (bool zero : {false, true}) {
    std::vector<float> hx = x;
    DeviceVec<float> dx(hx);
    std::vector<std::unique_ptr<DeviceVec<uint32_t>>> ids;
    std::vector<std::unique_ptr<DeviceVec<float>>> vals;
    std::vector<uint32_t*> pi;
    std::vector<float*> pv;
    for (size_t b = 0; b < k.size(); ++b) {
      const size_t cap = std::max<size_t>(1, std::min(k[b], bounds[b + 1] - bounds[b]));
      ids.push_back(std::make_unique<DeviceVec<uint32_t>>(cap));
      vals.push_back(std::make_unique<DeviceVec<float>>(cap));
      pi.push_back(ids.back()->get());
      pv.push_back(vals.back()->get());
    }
    DeviceVec<uint64_t> dcounts(k.size());
    std::vector<size_t> counts(k.size());
    ASSERT_CUDA(cuda::BlockTopK(dx.get(), bounds.data(), k.data(), k.size(), 100, zero, pi.data(),
                                pv.data(), dcounts.get(), counts.data(), &ws, 0));
    std::vector<SparseVec> want;
    BlockTopK(hx.data(), bounds, k, 100, zero, &want);
    for (size_t b = 0; b < k.size(); ++b) {
      ASSERT_EQ(counts[b], want[b].nnz()) << b;
      EXPECT_TRUE(SameBits(Coo(ids[b]->Host(counts[b]), vals[b]->Host(counts[b])), want[b])) << b;
    }
    const std::vector<float> y = dx.Host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(hx[i])) << i;
  }
}

// Bitwise, except that any NaN equals any NaN (payloads of NaN + NaN differ
// between vectorised CPU code and the GPU; NaN is never selected).
bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (Bits(a[i]) != Bits(b[i])) return false;
  }
  return true;
}

// Runs the same steps (x += g or the momentum form, select, zero) through
// the CPU and GPU SelectTopKStep; selection, x, velocity and the reuse
// state's counters must agree after every step.
void StepsMatch(const std::vector<std::vector<float>>& grads, size_t k, bool momentum, bool reuse,
                const std::string& what) {
  cuda::Workspace ws;
  const size_t n = grads[0].size();
  std::vector<float> x(n, 0.0f), u(n, 0.0f);
  DeviceVec<float> dx(x), du(u);
  ThresholdReuse cpu_r, gpu_r;
  const size_t cap = std::max<size_t>(1, std::min(k, n));
  DeviceVec<uint32_t> di(cap);
  DeviceVec<float> dv(cap);
  for (size_t s = 0; s < grads.size(); ++s) {
    const std::string w =
        what + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " step=" + std::to_string(s);
    DeviceVec<float> dg(grads[s]);
    ASSERT_CUDA(dg.error());
    Accumulate ca{grads[s].data(), momentum ? u.data() : nullptr, 0.9f};
    SparseVec want;
    SelectTopKStep(x.data(), n, k, 4, &ca, reuse ? &cpu_r : nullptr, true, &want);
    Accumulate ga{dg.get(), momentum ? du.get() : nullptr, 0.9f};
    size_t count = 0;
    ASSERT_CUDA(cuda::SelectTopKStep(dx.get(), n, k, 4, &ga, reuse ? &gpu_r : nullptr, true,
                                     di.get(), dv.get(), nullptr, &count, &ws, 0));
    ASSERT_EQ(count, want.nnz()) << w;
    ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), want)) << w;
    ASSERT_TRUE(SameFloats(dx.Host(n), x)) << w;
    if (momentum) {
      ASSERT_TRUE(SameFloats(du.Host(n), u)) << w;
    }
    ASSERT_EQ(gpu_r.hits, cpu_r.hits) << w;
    ASSERT_EQ(gpu_r.misses_few, cpu_r.misses_few) << w;
    ASSERT_EQ(gpu_r.misses_many, cpu_r.misses_many) << w;
    ASSERT_EQ(gpu_r.last_key, cpu_r.last_key) << w;
    ASSERT_EQ(gpu_r.margin, cpu_r.margin) << w;
  }
}

std::vector<float> Scaled(std::vector<float> v, float f) {
  for (float& x : v) x *= f;
  return v;
}

TEST(CudaTopKStep, MatchesCpuOnEveryDistribution) {
  SKIP_WITHOUT_DEVICE();
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{1}, size_t{4097}, size_t{300007}}) {
      std::vector<std::vector<float>> g;
      for (uint32_t s = 0; s < 5; ++s) g.push_back(Make(d, n, 40 + s));
      for (size_t k : {size_t{0}, size_t{1}, n / 100 + 1, n / 3, n}) {
        for (int mode = 0; mode < 4; ++mode) {
          StepsMatch(g, k, mode & 1, mode & 2, std::string(testing::Name(d)));
        }
      }
    }
  }
}

TEST(CudaTopKStep, AdversarialStepsMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 200003;
  const std::vector<float> base = Make(Dist::kGauss, n, 1);
  // Magnitudes jumping 1000x up, then 1000x down.
  StepsMatch({base, base, Scaled(base, 1000.0f), Scaled(base, 1000.0f), Scaled(base, 1e-3f)}, 2000,
             false, true, "jump");
  // All equal magnitudes; all zeros; NaN and Inf.
  std::vector<float> eq(n), zeros(n, 0.0f), special = Make(Dist::kMixedSpecial, n, 2);
  for (size_t i = 0; i < n; ++i) eq[i] = i % 3 ? 0.25f : -0.25f;
  for (size_t k : {size_t{1}, size_t{2000}, n / 2, n}) {
    StepsMatch({eq, eq, eq}, k, false, true, "all-equal");
    StepsMatch({zeros, zeros}, k, true, true, "zeros");
    StepsMatch({special, special, base}, k, true, true, "nan-inf");
  }
}

TEST(CudaTopKStep, LargeBucketMatchesCpuWithReuse) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 4000037;
  std::vector<std::vector<float>> g;
  for (uint32_t s = 0; s < 6; ++s) g.push_back(Scaled(Make(Dist::kGauss, n, 70 + s), 1 + s % 2));
  for (size_t k : {n / 100, n / 1000}) StepsMatch(g, k, true, true, "large");
}

TEST(CudaTopKStep, BucketLengthChangesBetweenSteps) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  ThresholdReuse cpu_r, gpu_r;
  for (size_t n : {size_t{1000}, size_t{100000}, size_t{50}, size_t{30001}}) {
    const size_t k = n / 100 + 1;
    std::vector<float> x = Make(Dist::kGauss, n, static_cast<uint32_t>(n));
    DeviceVec<float> dx(x);
    SparseVec want;
    SelectTopKStep(x.data(), n, k, 0, nullptr, &cpu_r, false, &want);
    DeviceVec<uint32_t> di(k);
    DeviceVec<float> dv(k);
    size_t count = 0;
    ASSERT_CUDA(cuda::SelectTopKStep(dx.get(), n, k, 0, nullptr, &gpu_r, false, di.get(), dv.get(),
                                     nullptr, &count, &ws, 0));
    ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), want)) << n;
    ASSERT_EQ(gpu_r.hits, cpu_r.hits) << n;
    ASSERT_EQ(gpu_r.misses(), cpu_r.misses()) << n;
  }
}

// Every kind of entry the non-finite count must tell apart, about one in
// `every`: NaN, +-Inf, and finite magnitudes above 3.19e38, which share +Inf's
// pass-1 bucket and sum to Inf when two meet.
std::vector<float> WithSpecials(std::vector<float> v, size_t every, uint32_t seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t i = seed % every; i < v.size(); i += every) {
    const float pick[6] = {nan, inf, -inf, 3.3e38f, -3.3e38f, std::numeric_limits<float>::max()};
    v[i] = pick[(i / every + seed) % 6];
  }
  return v;
}

size_t CountNonFinite(const std::vector<float>& v) {
  size_t c = 0;
  for (float f : v) c += std::isfinite(f) ? 0 : 1;
  return c;
}

// The GPU's d_nonfinite equals what the host SelectTopKStep adds to its
// `nonfinite` (and a plain count), on the k = 0, full-select and reuse
// (hit and miss) paths, with and without the accumulation. Without acc the
// host form counts nothing, so its reference there is the step with a zero
// gradient (x + 0 keeps every NaN and Inf). The two counts come back in one
// copy (d_nonfinite = d_count + 1), starting from garbage: the count is set,
// not added to.
TEST(CudaTopKStep, NonFiniteCountMatchesHostForm) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{300007}}) {
    for (size_t k : {size_t{0}, size_t{1}, n / 100 + 1, n}) {
      for (int mode = 0; mode < 4; ++mode) {
        const bool acc = mode & 1, reuse = mode & 2;
        const std::vector<float> zeros(n, 0.0f);
        std::vector<float> x = WithSpecials(Make(Dist::kGauss, n, 5), 89, 1);
        DeviceVec<float> dx(x);
        ASSERT_CUDA(dx.error());
        ThresholdReuse cpu_r, gpu_r;
        const size_t cap = std::max<size_t>(1, std::min(k, n));
        DeviceVec<uint32_t> di(cap);
        DeviceVec<float> dv(cap);
        DeviceVec<uint64_t> counts(2);
        ASSERT_CUDA(counts.error());
        for (uint32_t s = 0; s < 6; ++s) {
          const std::string w = "n=" + std::to_string(n) + " k=" + std::to_string(k) +
                                " acc=" + std::to_string(acc) + " reuse=" + std::to_string(reuse) +
                                " step=" + std::to_string(s);
          // Steady steps (reuse hits), then a 1000x jump (misses) and specials
          // that overflow into Inf.
          std::vector<float> g = Make(Dist::kGauss, n, 60 + s);
          if (s == 3) g = Scaled(g, 1000.0f);
          if (s == 3 || s == 4) g = WithSpecials(g, 997, s);
          if (!acc) {  // a fresh x each step, so that reuse still predicts
            x = s == 3 || s == 4 ? WithSpecials(g, 89, s) : g;
            if (n > 0) {
              ASSERT_CUDA(
                  cudaMemcpy(dx.get(), x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
            }
          }
          std::vector<float> after = x;
          if (acc) {
            for (size_t i = 0; i < n; ++i) after[i] += g[i];
          }
          const size_t plain = CountNonFinite(after);
          DeviceVec<float> dg(g);
          ASSERT_CUDA(dg.error());
          Accumulate ca{acc ? g.data() : zeros.data(), nullptr, 0.0f};
          SparseVec want;
          size_t host_bad = 0;
          SelectTopKStep(x.data(), n, k, 2, &ca, reuse ? &cpu_r : nullptr, true, &want, &host_bad);
          ASSERT_EQ(host_bad, plain) << w;
          Accumulate ga{dg.get(), nullptr, 0.0f};
          ASSERT_CUDA(cudaMemset(counts.get(), 0xff, 2 * sizeof(uint64_t)));
          ASSERT_CUDA(cuda::SelectTopKStep(dx.get(), n, k, 2, acc ? &ga : nullptr,
                                           reuse ? &gpu_r : nullptr, true, di.get(), dv.get(),
                                           counts.get(), nullptr, &ws, 0, counts.get() + 1));
          uint64_t got[2] = {0, 0};
          ASSERT_CUDA(cudaMemcpyAsync(got, counts.get(), sizeof got, cudaMemcpyDeviceToHost, 0));
          ASSERT_CUDA(cudaStreamSynchronize(0));
          EXPECT_EQ(got[1], host_bad) << w;
          ASSERT_EQ(got[0], want.nnz()) << w;
          ASSERT_TRUE(SameBits(Coo(di.Host(want.nnz()), dv.Host(want.nnz())), want)) << w;
          if (acc) {
            ASSERT_TRUE(SameFloats(dx.Host(n), x)) << w;
          }
          ASSERT_EQ(gpu_r.hits, cpu_r.hits) << w;
          ASSERT_EQ(gpu_r.misses(), cpu_r.misses()) << w;
        }
        // Both reuse paths ran (for k = 1 an Inf is always the pick: no miss).
        if (reuse && k > 0 && k < n && n > 1000) {
          EXPECT_GT(cpu_r.hits, 0u) << n << " " << k;
          if (k > 1) {
            EXPECT_GT(cpu_r.misses(), 0u) << n << " " << k;
          }
        }
      }
    }
  }
}

// With a null d_count the non-finite count still lands in d_nonfinite, on
// the k = 0 pass (x as it is) and the full select's pass 1.
TEST(CudaTopKStep, NonFiniteCountWithoutDeviceCount) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  const size_t n = 4097, k = 40;
  const std::vector<float> x = WithSpecials(Make(Dist::kGauss, n, 9), 89, 2);
  const size_t want = CountNonFinite(x);
  ASSERT_GT(want, 0u);
  for (size_t kk : {size_t{0}, k}) {
    DeviceVec<float> dx(x);
    DeviceVec<uint32_t> di(k);
    DeviceVec<float> dv(k);
    DeviceVec<uint64_t> bad(1);
    ASSERT_CUDA(cudaMemset(bad.get(), 0xff, sizeof(uint64_t)));
    size_t count = 0;
    ASSERT_CUDA(cuda::SelectTopKStep(dx.get(), n, kk, 0, nullptr, nullptr, false, di.get(),
                                     dv.get(), nullptr, &count, &ws, 0, bad.get()));
    EXPECT_EQ(count, kk) << kk;
    EXPECT_EQ(bad.Host(1)[0], want) << kk;
  }
}

SparseVec RandomRun(size_t universe, uint32_t every, uint32_t seed) {
  SparseVec s;
  std::vector<float> v = Make(Dist::kTies, universe, seed);
  for (size_t i = 0; i < universe; ++i) {
    if ((i * 2654435761u + seed) % every == 0) {
      s.idx.push_back(static_cast<uint32_t>(i));
      s.val.push_back(v[i]);
    }
  }
  return s;
}

// Ok-Topk's fused local compaction: the GPU's accumulated x, velocity,
// entries and full count equal the CPU twin's for every distribution and
// kind of threshold; a capacity below the count writes a prefix.
TEST(CudaCompactAboveStep, MatchesCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{1}, size_t{4097}, size_t{300007}}) {
      const std::vector<float> x0 = Make(d, n, 70), g = Make(d, n, 71), u0 = Make(d, n, 72);
      for (float t : {-1.0f, 0.0f, nan, 0.5f, 3.0f, inf}) {
        for (bool momentum : {false, true}) {
          const std::string w =
              Where(d, n, 0) + " t=" + std::to_string(t) + (momentum ? " momentum" : "");
          std::vector<float> x = x0, u = u0;
          Accumulate ca{g.data(), momentum ? u.data() : nullptr, 0.9f};
          SparseVec want;
          const size_t want_count = CompactAboveStep(x.data(), n, &ca, t, 2, n, &want);
          DeviceVec<float> dx(x0), du(u0), dg(g);
          DeviceVec<uint32_t> di(std::max<size_t>(1, n));
          DeviceVec<float> dv(std::max<size_t>(1, n));
          ASSERT_CUDA(dx.error());
          Accumulate ga{dg.get(), momentum ? du.get() : nullptr, 0.9f};
          size_t count = 0;
          ASSERT_CUDA(cuda::CompactAboveStep(dx.get(), n, &ga, t, 2, di.get(), dv.get(), n, nullptr,
                                             &count, &ws, 0));
          ASSERT_EQ(count, want_count) << w;
          ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), want)) << w;
          ASSERT_TRUE(SameFloats(dx.Host(n), x)) << w;
          if (momentum) {
            ASSERT_TRUE(SameFloats(du.Host(n), u)) << w;
          }
        }
      }
    }
  }
}

TEST(CudaCoo, MergeAddMatchesCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  for (uint32_t ea : {1u, 3u, 50u}) {
    for (uint32_t eb : {1u, 7u, 1000000u}) {
      const SparseVec a = RandomRun(200000, ea, 1), b = RandomRun(200000, eb, 2);
      DeviceVec<uint32_t> ai(a.idx), bi(b.idx), oi(a.nnz() + b.nnz() + 1);
      DeviceVec<float> av(a.val), bv(b.val), ov(a.nnz() + b.nnz() + 1);
      size_t count = 0;
      ASSERT_CUDA(cuda::MergeAdd(ai.get(), av.get(), a.nnz(), bi.get(), bv.get(), b.nnz(), oi.get(),
                                 ov.get(), nullptr, &count, &ws, 0));
      SparseVec want;
      MergeAdd(View(a), View(b), &want);
      ASSERT_EQ(count, want.nnz());
      ASSERT_TRUE(SameBits(Coo(oi.Host(count), ov.Host(count)), want)) << ea << " " << eb;
    }
  }
}

TEST(CudaCoo, ScatterAndDenseConversionsMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  for (Dist d : AllDists()) {
    const size_t n = 123457;
    const std::vector<float> x = Make(d, n, 77);
    DeviceVec<float> dx(x);
    DeviceVec<uint32_t> di(n);
    DeviceVec<float> dv(n);
    size_t count = 0;
    ASSERT_CUDA(
        cuda::DenseToSparse(dx.get(), n, 10, di.get(), dv.get(), n, nullptr, &count, &ws, 0));
    SparseVec want;
    DenseToSparse(x.data(), n, 10, &want);
    const SparseVec got = Coo(di.Host(count), dv.Host(count));
    ASSERT_TRUE(SameBits(got, want)) << testing::Name(d);

    for (float thr : {0.5f, 2.0f, 0.0f}) {
      ASSERT_CUDA(
          cuda::CompactAbove(dx.get(), n, thr, 10, di.get(), dv.get(), n, nullptr, &count, &ws, 0));
      SparseVec above;
      CompactAbove(x.data(), n, thr, 10, &above);
      ASSERT_TRUE(SameBits(Coo(di.Host(count), dv.Host(count)), above)) << thr;
    }

    DeviceVec<uint32_t> si(want.idx);
    DeviceVec<float> sv(want.val);
    DeviceVec<float> dense(n);
    ASSERT_CUDA(cuda::SparseToDense(si.get(), sv.get(), want.nnz(), 10, dense.get(), n, 0));
    ASSERT_CUDA(cuda::ScatterAdd(si.get(), sv.get(), want.nnz(), 10, -0.75f, dense.get(), 0));
    std::vector<float> cpu(n);
    SparseToDense(View(want), 10, cpu.data(), n);
    ScatterAdd(View(want), 10, -0.75f, cpu.data());
    const std::vector<float> gpu = dense.Host(n);
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(cpu[i])) continue;  // NaN payloads may differ
      ASSERT_EQ(Bits(gpu[i]), Bits(cpu[i])) << i;
    }
  }
}

TEST(CudaCoo, DenseToSparseReportsOverflow) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  const std::vector<float> x(1000, 1.0f);
  DeviceVec<float> dx(x);
  DeviceVec<uint32_t> di(10);
  DeviceVec<float> dv(10);
  size_t count = 0;
  ASSERT_CUDA(
      cuda::DenseToSparse(dx.get(), x.size(), 0, di.get(), dv.get(), 10, nullptr, &count, &ws, 0));
  EXPECT_EQ(count, 1000u);
  const std::vector<uint32_t> idx = di.Host(10);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(idx[i], i);
}

// ---- A device residual's operations against their CPU twins.

std::vector<size_t> ResidualSizes() {
  return {size_t{0}, size_t{1}, size_t{255}, size_t{4097}, size_t{300007}};
}

TEST(CudaResidualOps, AccumulateCountMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  for (Dist d : AllDists()) {
    for (size_t n : ResidualSizes()) {
      const std::vector<float> x0 = Make(d, n, 80), g = Make(d, n, 81), u0 = Make(d, n, 82);
      for (bool momentum : {false, true}) {
        const std::string w = Where(d, n, 0) + (momentum ? " momentum" : "");
        std::vector<float> x = x0, u = u0;
        AccumulateInto(x.data(), n, Accumulate{g.data(), momentum ? u.data() : nullptr, 0.9f});
        DeviceVec<float> dx(x0), du(u0), dg(g);
        DeviceVec<uint64_t> dc(1);
        ASSERT_CUDA(dx.error());
        ASSERT_CUDA(dc.error());
        size_t count = 12345;
        ASSERT_CUDA(cuda::AccumulateCount(dx.get(), n,
                                          Accumulate{dg.get(), momentum ? du.get() : nullptr, 0.9f},
                                          dc.get(), &count, 0));
        EXPECT_EQ(count, CountNonFinite(x)) << w;
        EXPECT_EQ(dc.Host(1)[0], count) << w;
        ASSERT_TRUE(SameFloats(dx.Host(n), x)) << w;
        if (momentum) {
          ASSERT_TRUE(SameFloats(du.Host(n), u)) << w;
        }
      }
    }
  }
}

TEST(CudaResidualOps, AccumulateCountResetsTheCount) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 10000;
  std::vector<float> g(n, 1.0f);
  g[17] = std::numeric_limits<float>::infinity();
  g[9000] = std::numeric_limits<float>::quiet_NaN();
  DeviceVec<float> dx(std::vector<float>(n, 0.0f)), dg(g);
  DeviceVec<uint64_t> dc(1);
  for (int round = 0; round < 3; ++round) {
    size_t count = 0;
    ASSERT_CUDA(cuda::AccumulateCount(dx.get(), n, Accumulate{dg.get()}, dc.get(), &count, 0));
    EXPECT_EQ(count, 2u) << round;  // not 2 * (round + 1)
  }
  EXPECT_EQ(dx.Host(n)[5], 3.0f);
}

TEST(CudaResidualOps, ZeroNonFiniteMatchesCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  for (Dist d : AllDists()) {
    for (size_t n : ResidualSizes()) {
      const std::string w = Where(d, n, 0);
      std::vector<float> x = Make(d, n, 90);
      if (n > 300) x[n - 1] = -std::numeric_limits<float>::infinity();  // the last entry too
      DeviceVec<float> dx(x);
      DeviceVec<uint64_t> dcf(2);
      ASSERT_CUDA(dx.error());
      size_t want_first = 0;
      const size_t want = ZeroNonFinite(x.data(), n, &want_first);
      size_t count = 12345, first = 12345;
      ASSERT_CUDA(cuda::ZeroNonFinite(dx.get(), n, dcf.get(), &count, &first, 0));
      EXPECT_EQ(count, want) << w;
      EXPECT_EQ(first, want_first) << w;
      const std::vector<uint64_t> cf = dcf.Host(2);
      EXPECT_EQ(cf[0], want) << w;
      EXPECT_EQ(cf[1], want_first) << w;
      const std::vector<float> y = dx.Host(n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(x[i])) << w << " " << i;
      // A second pass finds nothing; only the count is asked for.
      ASSERT_CUDA(cuda::ZeroNonFinite(dx.get(), n, dcf.get(), &count, nullptr, 0));
      EXPECT_EQ(count, 0u) << w;
      EXPECT_EQ(dcf.Host(2)[1], n) << w;
    }
  }
}

TEST(CudaResidualOps, ZeroAtMatchesCpuBitwise) {
  SKIP_WITHOUT_DEVICE();
  for (Dist d : AllDists()) {
    const size_t n = 100003;
    std::vector<float> x = Make(d, n, 91);
    std::vector<uint32_t> idx;
    for (size_t i = 0; i < n; i += 1 + (i * 2654435761u) % 13) {
      idx.push_back(static_cast<uint32_t>(i + 7));
    }
    idx.push_back(7);  // a repeat
    idx.push_back(static_cast<uint32_t>(n - 1 + 7));
    DeviceVec<float> dx(x);
    DeviceVec<uint32_t> di(idx);
    ASSERT_CUDA(dx.error());
    ASSERT_CUDA(di.error());
    ZeroAt(idx.data(), idx.size(), 7, x.data());
    ASSERT_CUDA(cuda::ZeroAt(di.get(), idx.size(), 7, dx.get(), 0));
    ASSERT_CUDA(cuda::ZeroAt(nullptr, 0, 7, dx.get(), 0));
    const std::vector<float> y = dx.Host(n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(x[i])) << testing::Name(d) << i;
  }
}

TEST(CudaResidualOps, SumOfSquaresMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  cuda::Workspace ws;
  for (Dist d : AllDists()) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{300007}, size_t{3000017}}) {
      const std::string w = Where(d, n, 0);
      const std::vector<float> x = Make(d, n, 92);
      DeviceVec<float> dx(x);
      DeviceVec<double> dout(1);
      ASSERT_CUDA(dx.error());
      const double want = SumOfSquares(x.data(), n);
      double got = -1.0;
      ASSERT_CUDA(cuda::SumOfSquares(dx.get(), n, dout.get(), &got, &ws, 0));
      const double on_device = dout.Host(1)[0];
      EXPECT_EQ(std::memcmp(&on_device, &got, sizeof got), 0) << w;  // NaN included
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << w << " " << got;
      } else if (std::isinf(want) || want == 0.0) {
        EXPECT_EQ(got, want) << w;
      } else {
        EXPECT_LE(std::fabs(got - want), 1e-12 * want) << w << " " << got << " " << want;
      }
      // The same order every time: a second call gives the same bits.
      double again = -1.0;
      ASSERT_CUDA(cuda::SumOfSquares(dx.get(), n, nullptr, &again, &ws, 0));
      EXPECT_EQ(std::memcmp(&again, &got, sizeof got), 0) << w;
    }
  }
}

}  // namespace
}  // namespace gradex::kernels
