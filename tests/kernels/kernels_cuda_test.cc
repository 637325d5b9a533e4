// GPU kernels against the CPU kernels, bit for bit. Skips where no CUDA
// device is visible.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/sparse_cuda.h"
#include "kernels/sparse.h"
#include "tests/kernels/reference.h"

namespace gradex::kernels {
namespace {

using testing::AllDists;
using testing::Bits;
using testing::Dist;
using testing::Make;
using testing::SameBits;

#define SKIP_WITHOUT_DEVICE()                                                           \
  do {                                                                                  \
    int count = 0;                                                                      \
    const cudaError_t e = cudaGetDeviceCount(&count);                                   \
    if (e != cudaSuccess || count == 0) {                                               \
      GTEST_SKIP() << "no CUDA device: "                                                \
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0"); \
    }                                                                                   \
  } while (0)

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

}  // namespace
}  // namespace gradex::kernels
