// DeviceMemory on a GPU: every operation on device buffers against its host
// twin on the same data (kernels/sparse.h, kernels/topk_step.h and the call
// frame's accumulation), bit for bit but for NaN payloads and the sum of
// squares' order. Skips without a GPU; the checks that need none (host
// memory refused, nothing works before Bind, UNIMPLEMENTED without CUDA)
// run everywhere.
#include "services/agent/device_memory.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/call_frame.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>

#include "tests/cuda_device.h"
#endif

namespace gradex::agent {
namespace {

TEST(DeviceMemory, RefusesHostMemoryAndWorksOnlyAfterBind) {
  DeviceMemory m;
  std::vector<float> host(16, 1.0f);
  const absl::Status bound = m.Bind(host);
#if GRADEX_AGENT_CUDA
  // Host memory is not device memory (or there is no driver at all).
  EXPECT_EQ(bound.code(), absl::StatusCode::kInvalidArgument) << bound;
  DeviceBuffer b;
  const absl::Status s = m.Allocate(4, &b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("Bind"), std::string::npos) << s;
  EXPECT_EQ(m.Synchronize().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.SumOfSquares(host).status().code(), absl::StatusCode::kFailedPrecondition);
#else
  EXPECT_EQ(bound.code(), absl::StatusCode::kUnimplemented) << bound;
  EXPECT_NE(bound.message().find("without CUDA"), std::string::npos) << bound;
#endif
}

#if GRADEX_AGENT_CUDA

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Bitwise, but any NaN equals any NaN (the GPU's NaN payloads differ from
// the CPU's vector code's).
bool SameFloats(const std::vector<float>& a, const std::vector<float>& b, std::string* where) {
  if (a.size() != b.size()) {
    *where = "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (Bits(a[i]) != Bits(b[i])) {
      *where = "entry " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
               std::to_string(b[i]);
      return false;
    }
  }
  return true;
}

#define EXPECT_SAME_FLOATS(a, b)                      \
  do {                                                \
    std::string where_;                               \
    EXPECT_TRUE(SameFloats(a, b, &where_)) << where_; \
  } while (0)

std::vector<float> Gauss(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = g(rng) * scale;
  return x;
}

// A trainer's bucket: device memory of the test's own, freed at exit.
class Bucket {
 public:
  explicit Bucket(const std::vector<float>& host) : n_(host.size()) {
    err_ = cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(1, n_) * sizeof(float));
    if (err_ == cudaSuccess && n_ > 0) {
      err_ = cudaMemcpy(p_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice);
    }
  }
  ~Bucket() {
    if (p_ != nullptr) cudaFree(p_);
  }
  std::span<float> span() const { return {p_, n_}; }
  cudaError_t error() const { return err_; }

 private:
  float* p_ = nullptr;
  size_t n_;
  cudaError_t err_ = cudaSuccess;
};

std::vector<float> Host(DeviceMemory& m, std::span<const float> x) {
  std::vector<float> h(x.size());
  const absl::Status s = m.CopyToHost(x, h);
  EXPECT_TRUE(s.ok()) << s;
  return h;
}

// Binds to a fresh bucket of n entries and allocates a residual there.
struct Fixture {
  explicit Fixture(size_t n, uint32_t seed) : grad_host(Gauss(n, seed)), bucket(grad_host) {}
  std::vector<float> grad_host;
  Bucket bucket;
  DeviceMemory m;
};

TEST(DeviceMemoryCuda, AllocatesZerosAndRoundTrips) {
  SKIP_WITHOUT_DEVICE();
  Fixture f(100003, 1);
  ASSERT_EQ(f.bucket.error(), cudaSuccess);
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());  // again: cheap, same device
  DeviceBuffer r;
  ASSERT_TRUE(f.m.Allocate(100003, &r).ok());
  EXPECT_EQ(r.size(), 100003u);
  for (float v : Host(f.m, r.span())) ASSERT_EQ(Bits(v), 0u);
  const std::vector<float> x = Gauss(100003, 2);
  ASSERT_TRUE(f.m.Upload(x, r.span()).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);
  EXPECT_EQ(f.m.to_device_bytes(), x.size() * sizeof(float));
  EXPECT_EQ(f.m.to_host_bytes(), 2 * x.size() * sizeof(float));
  // Reallocation frees the old memory and zero-fills again; empty works.
  ASSERT_TRUE(f.m.Allocate(7, &r).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), std::vector<float>(7, 0.0f));
  DeviceBuffer empty;
  ASSERT_TRUE(f.m.Allocate(0, &empty).ok());
  EXPECT_EQ(empty.size(), 0u);
  ASSERT_TRUE(f.m.Synchronize().ok());
}

TEST(DeviceMemoryCuda, AccumulateMatchesTheHostRule) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 300007;
  for (bool momentum : {false, true}) {
    Fixture f(n, 3);
    std::vector<float> grad = f.grad_host;
    grad[5] = std::numeric_limits<float>::infinity();
    grad[6] = std::numeric_limits<float>::quiet_NaN();
    grad[7] = -0.0f;
    grad[8] = std::numeric_limits<float>::denorm_min();
    Bucket g(grad);
    ASSERT_EQ(g.error(), cudaSuccess);
    ASSERT_TRUE(f.m.Bind(g.span()).ok());
    DeviceBuffer r, u;
    ASSERT_TRUE(f.m.Allocate(n, &r).ok());
    ASSERT_TRUE(f.m.Allocate(n, &u).ok());
    std::vector<float> x = Gauss(n, 4), v = Gauss(n, 5, 0.1f);
    ASSERT_TRUE(f.m.Upload(x, r.span()).ok());
    ASSERT_TRUE(f.m.Upload(v, u.span()).ok());
    for (int step = 0; step < 3; ++step) {
      const size_t want =
          momentum ? AccumulateIntoResidual(grad, x, v, 0.9f) : AccumulateIntoResidual(grad, x);
      absl::StatusOr<size_t> got =
          f.m.Accumulate(g.span(), r.span(), momentum ? u.span() : std::span<float>(), 0.9f);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, want) << step;
      EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);
      if (momentum) EXPECT_SAME_FLOATS(Host(f.m, u.span()), v);
    }
  }
}

// The device path's fused step: the gradient (and the momentum) added into
// the residual inside the selection's first pass, with the non-finite count
// the call frame's residual rule needs, bit for bit as the host step.
TEST(DeviceMemoryCuda, FusedSelectTopKMatchesTheHostStep) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 200003, k = 2001;
  for (bool reuse : {false, true}) {
    for (bool momentum : {false, true}) {
      Fixture f(n, 21);
      std::vector<float> grad = f.grad_host;
      grad[11] = std::numeric_limits<float>::infinity();
      grad[12] = std::numeric_limits<float>::quiet_NaN();
      Bucket g(grad);
      ASSERT_EQ(g.error(), cudaSuccess);
      ASSERT_TRUE(f.m.Bind(g.span()).ok());
      DeviceBuffer r, u;
      ASSERT_TRUE(f.m.Allocate(n, &r).ok());
      ASSERT_TRUE(f.m.Allocate(n, &u).ok());
      std::vector<float> x = Gauss(n, 22), v = Gauss(n, 23, 0.1f);
      ASSERT_TRUE(f.m.Upload(x, r.span()).ok());
      ASSERT_TRUE(f.m.Upload(v, u.span()).ok());
      kernels::ThresholdReuse host_reuse, dev_reuse;
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(::testing::Message()
                     << "reuse " << reuse << " momentum " << momentum << " step " << step);
        const kernels::Accumulate host_acc{grad.data(), momentum ? v.data() : nullptr, 0.9f};
        const kernels::Accumulate dev_acc{g.span().data(), momentum ? u.span().data() : nullptr,
                                          0.9f};
        kernels::SparseVec want, got;
        size_t want_nonfinite = 0, got_nonfinite = 7;
        kernels::SelectTopKStep(x.data(), n, k, 3, &host_acc, reuse ? &host_reuse : nullptr, true,
                                &want, &want_nonfinite);
        ASSERT_TRUE(f.m.SelectTopK(r.span(), k, 3, &dev_acc, reuse ? &dev_reuse : nullptr, &got,
                                   &got_nonfinite)
                        .ok());
        EXPECT_EQ(got_nonfinite, want_nonfinite);
        EXPECT_EQ(got.idx, want.idx);
        EXPECT_SAME_FLOATS(got.val, want.val);
        EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);
        if (momentum) EXPECT_SAME_FLOATS(Host(f.m, u.span()), v);
      }
    }
  }
}

TEST(DeviceMemoryCuda, SelectTopKMatchesTheHostStepWithReuse) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 500009, k = 5000;
  Fixture f(n, 6);
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());
  DeviceBuffer r;
  ASSERT_TRUE(f.m.Allocate(n, &r).ok());
  std::vector<float> x(n, 0.0f);
  kernels::ThresholdReuse host_reuse, dev_reuse;
  for (int step = 0; step < 5; ++step) {
    // The same accumulation both ways, then the selection.
    const std::vector<float> g = Gauss(n, 10 + step, step == 3 ? 100.0f : 1.0f);
    Bucket dg(g);
    ASSERT_EQ(dg.error(), cudaSuccess);
    AccumulateIntoResidual(g, x);
    ASSERT_TRUE(f.m.Accumulate(dg.span(), r.span(), {}, 0.0f).ok());
    kernels::SparseVec want, got;
    // Appends: a prior entry stays first.
    want.idx.push_back(1);
    want.val.push_back(2.0f);
    got = want;
    kernels::SelectTopKStep(x.data(), n, k, 40, nullptr, &host_reuse, true, &want);
    const uint64_t before = f.m.to_host_bytes();
    ASSERT_TRUE(f.m.SelectTopK(r.span(), k, 40, nullptr, &dev_reuse, &got, nullptr).ok());
    ASSERT_EQ(got.nnz(), want.nnz()) << step;
    EXPECT_EQ(got.idx, want.idx) << step;
    EXPECT_SAME_FLOATS(got.val, want.val);
    EXPECT_EQ(f.m.to_host_bytes() - before, k * (sizeof(uint32_t) + sizeof(float)));
    EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);
    EXPECT_EQ(dev_reuse.hits, host_reuse.hits) << step;
    EXPECT_EQ(dev_reuse.misses(), host_reuse.misses()) << step;
    EXPECT_EQ(dev_reuse.last_key, host_reuse.last_key) << step;
  }
  // k beyond n, and k = 0.
  kernels::SparseVec all, none;
  DeviceBuffer small;
  ASSERT_TRUE(f.m.Allocate(10, &small).ok());
  const std::vector<float> s = Gauss(10, 30);
  ASSERT_TRUE(f.m.Upload(s, small.span()).ok());
  ASSERT_TRUE(f.m.SelectTopK(small.span(), 0, 0, nullptr, nullptr, &none, nullptr).ok());
  EXPECT_EQ(none.nnz(), 0u);
  ASSERT_TRUE(f.m.SelectTopK(small.span(), 50, 0, nullptr, nullptr, &all, nullptr).ok());
  kernels::SparseVec want;
  std::vector<float> hs = s;
  kernels::SelectTopKStep(hs.data(), 10, 50, 0, nullptr, nullptr, true, &want);
  EXPECT_EQ(all.idx, want.idx);
  EXPECT_SAME_FLOATS(all.val, want.val);
  EXPECT_SAME_FLOATS(Host(f.m, small.span()), hs);
}

TEST(DeviceMemoryCuda, CooOperationsMatchTheHostKernels) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 200003;
  Fixture f(n, 7);
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());
  DeviceBuffer r;
  ASSERT_TRUE(f.m.Allocate(n, &r).ok());
  std::vector<float> x = Gauss(n, 8);
  ASSERT_TRUE(f.m.Upload(x, r.span()).ok());
  kernels::SparseVec v;
  const std::vector<float> vals = Gauss(n, 9);
  for (uint32_t i = 0; i < n; i += 1 + (i * 2654435761u) % 17) {
    v.idx.push_back(i + 1000);
    v.val.push_back(vals[i]);
  }
  // ScatterAdd, twice (the staging buffers are reused).
  for (float scale : {-0.5f, 3.0f}) {
    kernels::ScatterAdd(kernels::View(v), 1000, scale, x.data());
    ASSERT_TRUE(f.m.ScatterAdd(v, 1000, scale, r.span()).ok());
  }
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);
  // An index outside the bucket is refused, and nothing is written.
  kernels::SparseVec bad = v;
  bad.idx.back() = static_cast<uint32_t>(1000 + n);
  EXPECT_FALSE(f.m.ScatterAdd(bad, 1000, 1.0f, r.span()).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);

  // ZeroAt with host indices (no base).
  std::vector<uint32_t> at;
  for (uint32_t i = 3; i < n; i += 97) at.push_back(i);
  kernels::ZeroAt(at.data(), at.size(), 0, x.data());
  ASSERT_TRUE(f.m.ZeroAt(at, r.span()).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), x);

  // SparseToDense: everything else becomes 0.
  std::vector<uint32_t> idx(v.idx);
  for (uint32_t& i : idx) i -= 1000;
  std::vector<float> dense(n, 1.0f);
  kernels::SparseToDense({idx.data(), v.val.data(), idx.size()}, 0, dense.data(), n);
  ASSERT_TRUE(f.m.SparseToDense(idx, v.val, r.span()).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), dense);
  ASSERT_TRUE(f.m.SparseToDense({}, {}, r.span()).ok());
  EXPECT_SAME_FLOATS(Host(f.m, r.span()), std::vector<float>(n, 0.0f));
}

TEST(DeviceMemoryCuda, NonFiniteAndNormMatchTheHostKernels) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 1000003;
  Fixture f(n, 11);
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());
  DeviceBuffer r;
  ASSERT_TRUE(f.m.Allocate(n, &r).ok());
  std::vector<float> x = Gauss(n, 12, 1e3f);
  ASSERT_TRUE(f.m.Upload(x, r.span()).ok());

  absl::StatusOr<double> sq = f.m.SumOfSquares(r.span());
  ASSERT_TRUE(sq.ok()) << sq.status();
  const double want_sq = kernels::SumOfSquares(x.data(), n);
  EXPECT_LE(std::fabs(*sq - want_sq), 1e-12 * want_sq) << *sq << " vs " << want_sq;

  size_t first = 0;
  absl::StatusOr<size_t> none = f.m.ZeroNonFinite(r.span(), &first);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0u);
  EXPECT_EQ(first, n);

  x[12345] = std::numeric_limits<float>::quiet_NaN();
  x[777] = -std::numeric_limits<float>::infinity();
  x[n - 1] = std::numeric_limits<float>::infinity();
  x[9] = -0.0f;
  ASSERT_TRUE(f.m.Upload(x, r.span()).ok());
  sq = f.m.SumOfSquares(r.span());
  ASSERT_TRUE(sq.ok());
  EXPECT_TRUE(std::isnan(*sq));
  size_t want_first = 0;
  const size_t want = kernels::ZeroNonFinite(x.data(), n, &want_first);
  absl::StatusOr<size_t> got = f.m.ZeroNonFinite(r.span(), &first);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, want);
  EXPECT_EQ(want, 3u);
  EXPECT_EQ(first, want_first);
  EXPECT_EQ(first, 777u);
  const std::vector<float> y = Host(f.m, r.span());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(x[i])) << i;
}

// The calling thread's current device is left as it was by every call.
TEST(DeviceMemoryCuda, LeavesTheCallersDeviceAlone) {
  SKIP_WITHOUT_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const int other = count - 1;  // the bucket lives on the last device
  ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
  Fixture f(1000, 13);
  ASSERT_EQ(f.bucket.error(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_TRUE(f.m.Bind(f.bucket.span()).ok());
  DeviceBuffer r;
  ASSERT_TRUE(f.m.Allocate(1000, &r).ok());
  ASSERT_TRUE(f.m.Accumulate(f.bucket.span(), r.span(), {}, 0.0f).ok());
  kernels::SparseVec out;
  ASSERT_TRUE(f.m.SelectTopK(r.span(), 10, 0, nullptr, nullptr, &out, nullptr).ok());
  EXPECT_EQ(out.nnz(), 10u);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  ASSERT_EQ(cudaSetDevice(other), cudaSuccess);  // the bucket's memory is freed there
}

#endif  // GRADEX_AGENT_CUDA

}  // namespace
}  // namespace gradex::agent
