// The CUDA backend: every operation of its Queue on device buffers against a
// host backend's Queue on the same data, bit for bit but for NaN payloads and
// the sum of squares' order; the ordering with a caller's streams by events
// (the queue follows a caller's pending work, a caller's stream follows the
// queue's); the calling thread's device and context left alone. Skips
// without a GPU; the checks that need none (host memory refused, Available
// naming the fix) run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/call_frame.h"
#include "device/cuda_backend.h"
#include "device/cuda_driver.h"
#include "device/device.h"
#include "device/host_backend.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"
#include "tests/cuda_device.h"

namespace gradex::device {
namespace {

TEST(CudaBackend, RefusesHostMemoryAndSaysWhetherItIsAvailable) {
  std::unique_ptr<Backend> backend = MakeCudaBackend();
  EXPECT_STREQ(backend->name(), "cuda");
  EXPECT_STREQ(DefaultBackend()->name(), "cuda");
  bool skip = false;
  const std::string problem = test_device::CudaDeviceProblem(&skip);
  const absl::Status available = backend->Available();
  if (problem.empty()) {
    EXPECT_TRUE(available.ok()) << available;
  } else if (skip) {
    EXPECT_FALSE(available.ok());
    EXPECT_NE(available.message().find("pass host memory"), std::string::npos) << available;
  }
  // Host memory is not device memory (or there is no driver at all).
  std::vector<float> host(16, 1.0f);
  EXPECT_EQ(backend->NewQueue(host.data()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->RecordCaller(0, host.data()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->Classify(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<PointerInfo> info = backend->Classify(host.data());
  if (info.ok()) {
    EXPECT_FALSE(info->device);
  }
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Bitwise, but any NaN equals any NaN (the GPU's NaN payloads differ from
// the CPU's vector code's).
bool SameFloats(std::span<const float> a, std::span<const float> b, std::string* where) {
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

// A trainer's memory: device memory of the test's own, on the current device.
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
  Bucket(const Bucket&) = delete;
  Bucket& operator=(const Bucket&) = delete;
  float* data() const { return p_; }
  std::span<float> span() const { return {p_, n_}; }
  cudaError_t error() const { return err_; }

 private:
  float* p_ = nullptr;
  size_t n_;
  cudaError_t err_ = cudaSuccess;
};

std::vector<float> Host(Queue& q, std::span<const float> x) {
  std::vector<float> h(x.size());
  const absl::Status s = q.CopyToHost(x, h);
  EXPECT_TRUE(s.ok()) << s;
  return h;
}

// The same values on the device (CUDA queue) and on the host (host queue).
struct Twin {
  std::unique_ptr<Buffer> dev, host;
  std::span<float> d() const { return dev->span(); }
  std::span<float> h() const { return host->span(); }
};

// A CUDA queue on a bucket's device and a host queue: every operation is
// run on both, and the results compared.
class Twins {
 public:
  explicit Twins(size_t bucket_size = 16) : bucket_(std::vector<float>(bucket_size, 0.0f)) {}

  // Call first (ASSERT_NO_FATAL_FAILURE).
  void Start() {
    ASSERT_EQ(bucket_.error(), cudaSuccess);
    ASSERT_TRUE(cuda_->Available().ok()) << cuda_->Available();
    absl::StatusOr<std::unique_ptr<Queue>> q = cuda_->NewQueue(bucket_.data());
    ASSERT_TRUE(q.ok()) << q.status();
    dev_ = *std::move(q);
    std::vector<float> h(1);
    q = host_backend_.NewQueue(h.data());
    ASSERT_TRUE(q.ok()) << q.status();
    host_ = *std::move(q);
  }
  Queue& dev() { return *dev_; }
  Queue& host() { return *host_; }
  Backend& backend() { return *cuda_; }

  Twin Allocate(size_t n) {
    Twin t;
    absl::StatusOr<std::unique_ptr<Buffer>> d = dev_->Allocate(n), h = host_->Allocate(n);
    EXPECT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(h.ok()) << h.status();
    if (d.ok()) t.dev = *std::move(d);
    if (h.ok()) t.host = *std::move(h);
    return t;
  }
  Twin Make(const std::vector<float>& values) {
    Twin t = Allocate(values.size());
    EXPECT_TRUE(dev_->Upload(values, t.d()).ok());
    EXPECT_TRUE(host_->Upload(values, t.h()).ok());
    return t;
  }
  void ExpectSame(const Twin& t) { EXPECT_SAME_FLOATS(Host(*dev_, t.d()), Host(*host_, t.h())); }

 private:
  Bucket bucket_;
  std::unique_ptr<Backend> cuda_ = MakeCudaBackend();
  HostBackend host_backend_;
  std::unique_ptr<Queue> dev_, host_;
};

TEST(CudaQueue, AllocatesZerosAndRoundTrips) {
  SKIP_WITHOUT_DEVICE();
  Twins t;
  ASSERT_NO_FATAL_FAILURE(t.Start());
  const size_t n = 100003;
  Twin r = t.Allocate(n);
  ASSERT_EQ(r.dev->size(), n);
  for (float v : Host(t.dev(), r.d())) ASSERT_EQ(Bits(v), 0u);
  const std::vector<float> x = Gauss(n, 2);
  ASSERT_TRUE(t.dev().Upload(x, r.d()).ok());
  EXPECT_SAME_FLOATS(Host(t.dev(), r.d()), x);
  ASSERT_TRUE(t.dev().Zero(r.d().subspan(10, 1000)).ok());
  std::vector<float> want = x;
  std::fill(want.begin() + 10, want.begin() + 1010, 0.0f);
  EXPECT_SAME_FLOATS(Host(t.dev(), r.d()), want);
  EXPECT_EQ(t.dev().counters().to_device_bytes, n * sizeof(float));
  EXPECT_EQ(t.dev().counters().to_host_bytes, 3 * n * sizeof(float));
  EXPECT_EQ(t.dev().counters().host_waits, 4u);
  // Many buffers, dropped and made again: each made zeroed from the pool.
  for (int round = 0; round < 3; ++round) {
    std::vector<Twin> many;
    for (size_t i = 1; i < 20; ++i) many.push_back(t.Make(Gauss(i * 1000, 40 + i)));
    Twin fresh = t.Allocate(7);
    EXPECT_SAME_FLOATS(Host(t.dev(), fresh.d()), std::vector<float>(7, 0.0f));
  }
  Twin empty = t.Allocate(0);
  EXPECT_EQ(empty.dev->size(), 0u);
  ASSERT_TRUE(t.dev().Synchronize().ok());
}

TEST(CudaQueue, AccumulateMatchesTheHostQueue) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 300007;
  for (bool momentum : {false, true}) {
    Twins t;
    ASSERT_NO_FATAL_FAILURE(t.Start());
    std::vector<float> g = Gauss(n, 3);
    g[5] = std::numeric_limits<float>::infinity();
    g[6] = std::numeric_limits<float>::quiet_NaN();
    g[7] = -0.0f;
    g[8] = std::numeric_limits<float>::denorm_min();
    Twin grad = t.Make(g), r = t.Make(Gauss(n, 4)), u = t.Make(Gauss(n, 5, 0.1f));
    for (int step = 0; step < 3; ++step) {
      absl::StatusOr<size_t> want =
          t.host().Accumulate(grad.h(), r.h(), momentum ? u.h() : std::span<float>(), 0.9f);
      absl::StatusOr<size_t> got =
          t.dev().Accumulate(grad.d(), r.d(), momentum ? u.d() : std::span<float>(), 0.9f);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(*got, *want) << step;
      t.ExpectSame(r);
      if (momentum) t.ExpectSame(u);
    }
  }
}

// The device path's fused step: the gradient (and the momentum) added into
// the residual inside the selection's first pass, with the non-finite count
// the call frame's residual rule needs, bit for bit as the host step.
TEST(CudaQueue, FusedSelectTopKMatchesTheHostStep) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 200003, k = 2001;
  for (bool reuse : {false, true}) {
    for (bool momentum : {false, true}) {
      Twins t;
      ASSERT_NO_FATAL_FAILURE(t.Start());
      std::vector<float> g = Gauss(n, 21);
      g[11] = std::numeric_limits<float>::infinity();
      g[12] = std::numeric_limits<float>::quiet_NaN();
      Twin grad = t.Make(g), r = t.Make(Gauss(n, 22)), u = t.Make(Gauss(n, 23, 0.1f));
      kernels::ThresholdReuse host_reuse, dev_reuse;
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE(::testing::Message()
                     << "reuse " << reuse << " momentum " << momentum << " step " << step);
        const kernels::Accumulate host_acc{grad.h().data(), momentum ? u.h().data() : nullptr,
                                           0.9f};
        const kernels::Accumulate dev_acc{grad.d().data(), momentum ? u.d().data() : nullptr, 0.9f};
        kernels::SparseVec want, got;
        size_t want_nonfinite = 0, got_nonfinite = 7;
        ASSERT_TRUE(t.host()
                        .SelectTopK(r.h(), k, 3, &host_acc, reuse ? &host_reuse : nullptr, &want,
                                    &want_nonfinite)
                        .ok());
        ASSERT_TRUE(t.dev()
                        .SelectTopK(r.d(), k, 3, &dev_acc, reuse ? &dev_reuse : nullptr, &got,
                                    &got_nonfinite)
                        .ok());
        EXPECT_EQ(got_nonfinite, want_nonfinite);
        EXPECT_EQ(want_nonfinite, 2u);
        EXPECT_EQ(got.idx, want.idx);
        EXPECT_SAME_FLOATS(got.val, want.val);
        t.ExpectSame(r);
        if (momentum) t.ExpectSame(u);
        EXPECT_EQ(dev_reuse.hits, host_reuse.hits);
        EXPECT_EQ(dev_reuse.misses(), host_reuse.misses());
      }
      EXPECT_EQ(t.dev().counters().to_host_bytes, t.host().counters().to_host_bytes);
    }
  }
}

TEST(CudaQueue, SelectTopKMatchesTheHostStepWithReuse) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 500009, k = 5000;
  Twins t;
  ASSERT_NO_FATAL_FAILURE(t.Start());
  Twin r = t.Allocate(n);
  kernels::ThresholdReuse host_reuse, dev_reuse;
  for (int step = 0; step < 5; ++step) {
    // The same accumulation both ways, then the selection.
    Twin g = t.Make(Gauss(n, 10 + step, step == 3 ? 100.0f : 1.0f));
    ASSERT_TRUE(t.host().Accumulate(g.h(), r.h(), {}, 0.0f).ok());
    ASSERT_TRUE(t.dev().Accumulate(g.d(), r.d(), {}, 0.0f).ok());
    kernels::SparseVec want, got;
    // Appends: a prior entry stays first.
    want.idx.push_back(1);
    want.val.push_back(2.0f);
    got = want;
    const uint64_t before = t.dev().counters().to_host_bytes;
    ASSERT_TRUE(t.host().SelectTopK(r.h(), k, 40, nullptr, &host_reuse, &want, nullptr).ok());
    ASSERT_TRUE(t.dev().SelectTopK(r.d(), k, 40, nullptr, &dev_reuse, &got, nullptr).ok());
    ASSERT_EQ(got.nnz(), want.nnz()) << step;
    EXPECT_EQ(got.idx, want.idx) << step;
    EXPECT_SAME_FLOATS(got.val, want.val);
    EXPECT_EQ(t.dev().counters().to_host_bytes - before, k * (sizeof(uint32_t) + sizeof(float)));
    t.ExpectSame(r);
    EXPECT_EQ(dev_reuse.hits, host_reuse.hits) << step;
    EXPECT_EQ(dev_reuse.misses(), host_reuse.misses()) << step;
    EXPECT_EQ(dev_reuse.last_key, host_reuse.last_key) << step;
  }
  // k beyond n, and k = 0.
  Twin small = t.Make(Gauss(10, 30));
  for (size_t kk : {size_t{0}, size_t{50}}) {
    kernels::SparseVec want, got;
    ASSERT_TRUE(t.host().SelectTopK(small.h(), kk, 0, nullptr, nullptr, &want, nullptr).ok());
    ASSERT_TRUE(t.dev().SelectTopK(small.d(), kk, 0, nullptr, nullptr, &got, nullptr).ok());
    EXPECT_EQ(got.nnz(), kk == 0 ? 0u : 10u);
    EXPECT_EQ(got.idx, want.idx);
    EXPECT_SAME_FLOATS(got.val, want.val);
    t.ExpectSame(small);
  }
}

TEST(CudaQueue, CooOperationsMatchTheHostQueue) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 200003;
  Twins t;
  ASSERT_NO_FATAL_FAILURE(t.Start());
  Twin r = t.Make(Gauss(n, 8));
  // Many ScatterAdds of different entries with no wait between them: each
  // stages through the same pinned buffers, which must not be overwritten
  // before the stream has read them.
  for (int round = 0; round < 20; ++round) {
    kernels::SparseVec v;
    const std::vector<float> vals = Gauss(n, 100 + round);
    const uint32_t stride = 1 + round % 7;
    for (uint32_t i = round; i < n; i += stride + (i * 2654435761u) % 17) {
      v.idx.push_back(i + 1000);
      v.val.push_back(vals[i]);
    }
    const float scale = round % 2 == 0 ? -0.5f : 3.0f;
    ASSERT_TRUE(t.host().ScatterAdd(v, 1000, scale, r.h()).ok());
    ASSERT_TRUE(t.dev().ScatterAdd(v, 1000, scale, r.d()).ok());
  }
  t.ExpectSame(r);
  EXPECT_EQ(t.dev().counters().to_device_bytes, t.host().counters().to_device_bytes);
  // An index outside the bucket is refused, and nothing is written.
  kernels::SparseVec bad;
  bad.idx = {1000, static_cast<uint32_t>(1000 + n)};
  bad.val = {1.0f, 2.0f};
  EXPECT_EQ(t.dev().ScatterAdd(bad, 1000, 1.0f, r.d()).code(), absl::StatusCode::kOutOfRange);
  t.ExpectSame(r);

  // ZeroAt with host indices (no base), then SparseToDense: everything else
  // becomes 0; each twice with other entries, without a wait.
  for (uint32_t first : {3u, 5u}) {
    std::vector<uint32_t> at;
    for (uint32_t i = first; i < n; i += 97) at.push_back(i);
    ASSERT_TRUE(t.host().ZeroAt(at, r.h()).ok());
    ASSERT_TRUE(t.dev().ZeroAt(at, r.d()).ok());
  }
  t.ExpectSame(r);
  for (uint32_t stride : {3u, 11u}) {
    std::vector<uint32_t> idx;
    for (uint32_t i = stride; i < n; i += stride) idx.push_back(i);
    const std::vector<float> val = Gauss(idx.size(), stride);
    ASSERT_TRUE(t.host().SparseToDense(idx, val, r.h()).ok());
    ASSERT_TRUE(t.dev().SparseToDense(idx, val, r.d()).ok());
  }
  t.ExpectSame(r);
  ASSERT_TRUE(t.dev().SparseToDense({}, {}, r.d()).ok());
  EXPECT_SAME_FLOATS(Host(t.dev(), r.d()), std::vector<float>(n, 0.0f));
}

TEST(CudaQueue, NonFiniteAndNormMatchTheHostQueue) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 1000003;
  Twins t;
  ASSERT_NO_FATAL_FAILURE(t.Start());
  std::vector<float> x = Gauss(n, 12, 1e3f);
  Twin r = t.Make(x);
  absl::StatusOr<double> sq = t.dev().SumOfSquares(r.d());
  ASSERT_TRUE(sq.ok()) << sq.status();
  const double want_sq = *t.host().SumOfSquares(r.h());
  EXPECT_LE(std::fabs(*sq - want_sq), 1e-12 * want_sq) << *sq << " vs " << want_sq;
  size_t first = 0;
  absl::StatusOr<size_t> none = t.dev().ZeroNonFinite(r.d(), &first);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0u);
  EXPECT_EQ(first, n);

  x[12345] = std::numeric_limits<float>::quiet_NaN();
  x[777] = -std::numeric_limits<float>::infinity();
  x[n - 1] = std::numeric_limits<float>::infinity();
  x[9] = -0.0f;
  ASSERT_TRUE(t.dev().Upload(x, r.d()).ok());
  ASSERT_TRUE(t.host().Upload(x, r.h()).ok());
  sq = t.dev().SumOfSquares(r.d());
  ASSERT_TRUE(sq.ok());
  EXPECT_TRUE(std::isnan(*sq));
  size_t want_first = 0;
  const absl::StatusOr<size_t> want = t.host().ZeroNonFinite(r.h(), &want_first);
  absl::StatusOr<size_t> got = t.dev().ZeroNonFinite(r.d(), &first);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(*got, 3u);
  EXPECT_EQ(first, want_first);
  EXPECT_EQ(first, 777u);
  const std::vector<float> y = Host(t.dev(), r.d());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(y[i]), Bits(r.h()[i])) << i;
}

TEST(CudaQueue, WholeBucketStagingMatchesTheHostQueue) {
  SKIP_WITHOUT_DEVICE();
  Twins t;
  ASSERT_NO_FATAL_FAILURE(t.Start());
  // Growing buckets, each staged out, changed on the host and staged back;
  // the next stage follows the last one's copy back without a wait.
  for (size_t n : {size_t{1000}, size_t{50000}, size_t{30000}, size_t{400000}}) {
    Twin r = t.Make(Gauss(n, static_cast<uint32_t>(n)));
    absl::StatusOr<std::span<float>> d = t.dev().StageToHost(r.d());
    absl::StatusOr<std::span<float>> h = t.host().StageToHost(r.h());
    ASSERT_TRUE(d.ok()) << d.status();
    ASSERT_TRUE(h.ok());
    EXPECT_SAME_FLOATS(*d, *h);
    for (float& v : *d) v = v * 0.5f + 1.0f;
    for (float& v : *h) v = v * 0.5f + 1.0f;
    ASSERT_TRUE(t.dev().StageToDevice(r.d()).ok());
    ASSERT_TRUE(t.host().StageToDevice(r.h()).ok());
    // A prefix, too.
    ASSERT_TRUE(t.dev().StageToDevice(r.d().first(n / 3)).ok());
    ASSERT_TRUE(t.host().StageToDevice(r.h().first(n / 3)).ok());
    t.ExpectSame(r);
  }
  EXPECT_EQ(t.dev().counters().to_host_bytes, t.host().counters().to_host_bytes);
  EXPECT_EQ(t.dev().counters().to_device_bytes, t.host().counters().to_device_bytes);
  // More than was staged is refused by the wrapper.
  Twin big = t.Allocate(500000);
  EXPECT_EQ(t.dev().StageToDevice(big.d()).code(), absl::StatusCode::kInternal);
}

// Holds a stream up on the host: the work queued behind it is pending.
void CUDART_CB Sleep(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

uintptr_t Handle(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }

// A caller's stream (its own or the legacy default stream, 0) writes the
// bucket's final values behind a delay; the queue, told of the caller's
// point, reads those values and not the old ones.
TEST(CudaQueue, FollowsTheCallersStream) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 1 << 20;
  const std::vector<float> old_values = Gauss(n, 1), new_values = Gauss(n, 2);
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "legacy default stream" : "a stream of the caller's");
    Bucket bucket(old_values), fresh(new_values);
    ASSERT_EQ(bucket.error(), cudaSuccess);
    ASSERT_EQ(fresh.error(), cudaSuccess);
    cudaStream_t caller = nullptr;
    if (!legacy) {
      ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
    }
    std::unique_ptr<Backend> backend = MakeCudaBackend();
    absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket.data());
    ASSERT_TRUE(q.ok()) << q.status();
    absl::StatusOr<std::unique_ptr<Buffer>> r = (*q)->Allocate(n);
    ASSERT_TRUE(r.ok()) << r.status();
    // The kernels are loaded before the caller's stream is held up: loading
    // one may wait for the whole device, which would hide a missing wait.
    ASSERT_TRUE((*q)->Accumulate(bucket.span(), (*r)->span(), {}, 0.0f).ok());
    ASSERT_TRUE((*q)->Zero((*r)->span()).ok());
    ASSERT_TRUE((*q)->Synchronize().ok());

    int ms = 300;
    ASSERT_EQ(cudaLaunchHostFunc(caller, Sleep, &ms), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(bucket.data(), fresh.data(), n * sizeof(float),
                              cudaMemcpyDeviceToDevice, caller),
              cudaSuccess);
    absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(Handle(caller), bucket.data());
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*q)->Wait(**e).ok());
    // An asynchronous operation, then one the host waits for.
    ASSERT_TRUE((*q)->Zero((*r)->span()).ok());
    absl::StatusOr<size_t> count = (*q)->Accumulate(bucket.span(), (*r)->span(), {}, 0.0f);
    ASSERT_TRUE(count.ok()) << count.status();
    EXPECT_SAME_FLOATS(Host(**q, (*r)->span()), new_values);
    EXPECT_SAME_FLOATS(Host(**q, bucket.span()), new_values);
    ASSERT_EQ(cudaStreamSynchronize(caller), cudaSuccess);
    if (caller != nullptr) {
      ASSERT_EQ(cudaStreamDestroy(caller), cudaSuccess);
    }
  }
}

// The queue's work is held up behind a caller's event; a second caller
// stream told to wait for the queue's point reads the queue's result.
TEST(CudaQueue, CallerWaitsForTheQueue) {
  SKIP_WITHOUT_DEVICE();
  const size_t n = 1 << 20;
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy ? "legacy default stream" : "a stream of the caller's");
    Bucket bucket(Gauss(n, 3)), out(std::vector<float>(n, 5.0f));
    ASSERT_EQ(bucket.error(), cudaSuccess);
    ASSERT_EQ(out.error(), cudaSuccess);
    cudaStream_t held = nullptr, reader = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking), cudaSuccess);
    if (!legacy) {
      ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
    }
    std::unique_ptr<Backend> backend = MakeCudaBackend();
    absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket.data());
    ASSERT_TRUE(q.ok()) << q.status();

    int ms = 300;
    ASSERT_EQ(cudaLaunchHostFunc(held, Sleep, &ms), cudaSuccess);
    absl::StatusOr<std::shared_ptr<Event>> start = backend->RecordCaller(Handle(held), out.data());
    ASSERT_TRUE(start.ok()) << start.status();
    ASSERT_TRUE((*q)->Wait(**start).ok());
    ASSERT_TRUE((*q)->Zero(bucket.span()).ok());
    absl::StatusOr<std::shared_ptr<Event>> done = (*q)->Record();
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_TRUE(backend->CallerWaits(Handle(reader), **done).ok());
    ASSERT_EQ(cudaMemcpyAsync(out.data(), bucket.data(), n * sizeof(float),
                              cudaMemcpyDeviceToDevice, reader),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
    std::vector<float> got(n, 1.0f);
    ASSERT_EQ(cudaMemcpy(got.data(), out.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_SAME_FLOATS(got, std::vector<float>(n, 0.0f));
    ASSERT_EQ(cudaStreamDestroy(held), cudaSuccess);
    if (reader != nullptr) {
      ASSERT_EQ(cudaStreamDestroy(reader), cudaSuccess);
    }
  }
}

// A caller's stream of another device cannot hold the event: the caller's
// thread waits for it instead, and the point is passed.
TEST(CudaQueue, CallersStreamOfAnotherDeviceIsWaitedFor) {
  SKIP_WITHOUT_DEVICE();
  SKIP_UNLESS_GPUS(2);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  Bucket bucket(Gauss(1000, 4));
  ASSERT_EQ(bucket.error(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  int ms = 100;
  ASSERT_EQ(cudaLaunchHostFunc(other, Sleep, &ms), cudaSuccess);
  std::unique_ptr<Backend> backend = MakeCudaBackend();
  absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(Handle(other), bucket.data());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(cudaStreamQuery(other), cudaSuccess);  // waited for
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);      // the failed record is not left behind
  absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket.data());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE((*q)->Wait(**e).ok());
  EXPECT_TRUE(backend->CallerWaits(0, **e).ok());
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  ASSERT_EQ(cudaStreamDestroy(other), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);  // the bucket's memory is freed there
}

// The calling thread's current device is left as it was by every call, and
// a thread that chose no device is given no context.
TEST(CudaQueue, LeavesTheCallersDeviceAlone) {
  SKIP_WITHOUT_DEVICE();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  const int other = count - 1;  // the bucket lives on the last device
  ASSERT_EQ(cudaSetDevice(other), cudaSuccess);
  Bucket bucket(Gauss(1000, 13));
  ASSERT_EQ(bucket.error(), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::unique_ptr<Backend> backend = MakeCudaBackend();

  auto work = [&] {
    absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket.data());
    ASSERT_TRUE(q.ok()) << q.status();
    absl::StatusOr<std::unique_ptr<Buffer>> r = (*q)->Allocate(1000);
    ASSERT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::shared_ptr<Event>> e = backend->RecordCaller(0, bucket.data());
    ASSERT_TRUE(e.ok()) << e.status();
    ASSERT_TRUE((*q)->Wait(**e).ok());
    ASSERT_TRUE((*q)->Accumulate(bucket.span(), (*r)->span(), {}, 0.0f).ok());
    kernels::SparseVec out;
    ASSERT_TRUE((*q)->SelectTopK((*r)->span(), 10, 0, nullptr, nullptr, &out, nullptr).ok());
    EXPECT_EQ(out.nnz(), 10u);
    ASSERT_TRUE((*q)->ScatterAdd(out, 0, 1.0f, (*r)->span()).ok());
    absl::StatusOr<std::span<float>> staged = (*q)->StageToHost((*r)->span());
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_TRUE((*q)->StageToDevice((*r)->span()).ok());
    absl::StatusOr<std::shared_ptr<Event>> done = (*q)->Record();
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_TRUE(backend->CallerWaits(0, **done).ok());
    // The buffer, the events and the queue are freed here too.
  };
  work();
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);

  const Driver* driver = OpenDriver(nullptr);
  ASSERT_NE(driver, nullptr);
  CUcontext before = nullptr, after = nullptr;
  std::thread thread([&] {
    driver->get_current(&before);
    work();
    driver->get_current(&after);
  });
  thread.join();
  EXPECT_EQ(before, nullptr);
  EXPECT_EQ(after, nullptr);
  ASSERT_EQ(cudaSetDevice(other), cudaSuccess);  // the bucket's memory is freed there
}

// Buffers and queues made by a backend outlive it (the pool is theirs too).
TEST(CudaQueue, OutlivesItsBackend) {
  SKIP_WITHOUT_DEVICE();
  Bucket bucket(Gauss(1000, 14));
  ASSERT_EQ(bucket.error(), cudaSuccess);
  std::unique_ptr<Backend> backend = MakeCudaBackend();
  absl::StatusOr<std::unique_ptr<Queue>> q = backend->NewQueue(bucket.data());
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::unique_ptr<Buffer>> r = (*q)->Allocate(1000);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<std::shared_ptr<Event>> e = (*q)->Record();
  ASSERT_TRUE(e.ok()) << e.status();
  backend.reset();
  const std::vector<float> x = Gauss(1000, 15);
  ASSERT_TRUE((*q)->Upload(x, (*r)->span()).ok());
  absl::StatusOr<std::unique_ptr<Buffer>> more = (*q)->Allocate(5000);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_SAME_FLOATS(Host(**q, (*r)->span()), x);
  q->reset();
  r->reset();
  e->reset();
}

}  // namespace
}  // namespace gradex::device
