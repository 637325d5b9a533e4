// The CUDA backend's steady step, on a GPU (skips for "no device"): a block
// selection waits once for any block count and gives the host queue's bits;
// changing block sizes stop growing the pinned staging after two steps with
// no device synchronisation; a buffer's release does not wait for the
// device; deferred counts and staged uploads add no wait; the pool's bound
// refuses and Trim gives the pool back.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "device/cuda_backend.h"
#include "device/device.h"
#include "device/host_backend.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"
#include "tests/cuda_device.h"

namespace gradex::device {
namespace {

// Floats in device memory (cudaMalloc: the trainer's, not the pool's).
class DeviceVec {
 public:
  explicit DeviceVec(const std::vector<float>& v) : n_(v.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(1, n_) * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, v.data(), n_ * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceVec() { cudaFree(p_); }
  std::span<float> span() const { return {p_, n_}; }
  std::vector<float> Host() const {
    std::vector<float> v(n_);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, n_ * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  float* p_ = nullptr;
  size_t n_;
};

std::vector<float> Values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<size_t> Bounds(size_t n, size_t blocks, std::mt19937& rng) {
  std::uniform_real_distribution<double> w(2.0, 4.0);
  std::vector<double> weight(blocks);
  double sum = 0;
  for (double& v : weight) sum += v = w(rng);
  std::vector<size_t> bounds = {0};
  double at = 0;
  for (size_t b = 0; b + 1 < blocks; ++b) {
    at += weight[b] / sum * static_cast<double>(n);
    bounds.push_back(static_cast<size_t>(at));
  }
  bounds.push_back(n);
  return bounds;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(CudaSteady, ABlockSelectionWaitsOnceAndGivesTheHostQueuesBits) {
  SKIP_WITHOUT_DEVICE();
  constexpr size_t kN = 1 << 20;
  for (size_t blocks : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << blocks << " blocks");
    std::unique_ptr<Backend> cuda = MakeCudaBackend();
    HostBackend host;
    std::vector<float> grad = Values(kN, 5), velocity = Values(kN, 6);
    grad[3] = NAN;
    DeviceVec d_grad(grad), d_velocity(velocity), d_x(std::vector<float>(kN, 0.0f));
    std::vector<float> h_x(kN, 0.0f);
    absl::StatusOr<std::unique_ptr<Queue>> dq = cuda->NewQueue(d_x.span().data());
    absl::StatusOr<std::unique_ptr<Queue>> hq = host.NewQueue(h_x.data());
    ASSERT_TRUE(dq.ok()) << dq.status();
    ASSERT_TRUE(hq.ok());
    std::mt19937 rng(3);
    std::vector<kernels::ThresholdReuse> d_reuse, h_reuse;
    for (int step = 0; step < 3; ++step) {
      const std::vector<size_t> bounds = Bounds(kN, blocks, rng);
      std::vector<size_t> keeps;
      for (size_t b = 0; b < blocks; ++b) keeps.push_back(b == 1 ? 0 : 1000 + b);
      const kernels::Accumulate da{d_grad.span().data(), d_velocity.span().data(), 0.9f};
      const kernels::Accumulate ha{grad.data(), velocity.data(), 0.9f};
      std::vector<kernels::SparseVec> got, want;
      size_t got_bad = 0, want_bad = 0;
      const uint64_t waits = (*dq)->counters().host_waits;
      ASSERT_TRUE(
          (*dq)->SelectTopKBlocks(d_x.span(), bounds, keeps, &da, &d_reuse, &got, &got_bad).ok());
      ASSERT_TRUE(
          (*hq)->SelectTopKBlocks(h_x, bounds, keeps, &ha, &h_reuse, &want, &want_bad).ok());
      EXPECT_EQ((*dq)->counters().host_waits - waits, 1u);
      ASSERT_EQ(got.size(), want.size());
      for (size_t b = 0; b < blocks; ++b) {
        EXPECT_EQ(got[b].idx, want[b].idx) << "block " << b;
        EXPECT_TRUE(SameBits(got[b].val, want[b].val)) << "block " << b;
        EXPECT_EQ(d_reuse[b].last_key, h_reuse[b].last_key);
      }
      EXPECT_EQ(got_bad, want_bad);
      EXPECT_TRUE(SameBits(d_velocity.Host(), velocity));
      std::vector<float> dev = d_x.Host();
      for (size_t i = 0; i < kN; ++i) {
        if (std::isnan(dev[i]) && std::isnan(h_x[i])) dev[i] = h_x[i];
      }
      EXPECT_TRUE(SameBits(dev, h_x));
    }
  }
}

// A device bucket's queue work over 20 steps with changing block and entry
// counts: after two steps no allocation outside the pool, never a device
// synchronisation, two waits a step.
TEST(CudaSteady, ChangingSizesStopGrowingAfterTwoSteps) {
  SKIP_WITHOUT_DEVICE();
  constexpr size_t kN = 1 << 22, kBlocks = 8;
  std::unique_ptr<Backend> cuda = MakeCudaBackend();
  DeviceVec d_grad(Values(kN, 1)), d_data(std::vector<float>(kN, 0.0f));
  absl::StatusOr<std::unique_ptr<Queue>> q = cuda->NewQueue(d_data.span().data());
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::unique_ptr<Buffer>> r = (*q)->Allocate(kN);
  ASSERT_TRUE(r.ok()) << r.status();
  std::mt19937 rng(9);
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const QueueCounters before = (*q)->counters();
    const std::vector<size_t> bounds = Bounds(kN, kBlocks, rng);
    std::vector<size_t> keeps;
    for (size_t b = 0; b < kBlocks; ++b) keeps.push_back((bounds[b + 1] - bounds[b]) / 100);
    const kernels::Accumulate acc{d_grad.span().data(), nullptr, 0.0f};
    std::vector<kernels::SparseVec> out;
    size_t bad = 0;
    ASSERT_TRUE(
        (*q)->SelectTopKBlocks((*r)->span(), bounds, keeps, &acc, nullptr, &out, &bad).ok());
    kernels::SparseVec all;
    for (const auto& o : out) {
      all.idx.insert(all.idx.end(), o.idx.begin(), o.idx.end());
      all.val.insert(all.val.end(), o.val.begin(), o.val.end());
    }
    ASSERT_TRUE((*q)->ScatterAdd(all, 0, 0.5f, (*r)->span()).ok());
    ASSERT_TRUE((*q)->SparseToDense(all.idx, all.val, d_data.span()).ok());
    ASSERT_TRUE((*q)->ZeroAt(all.idx, (*r)->span()).ok());
    ASSERT_TRUE((*q)->SumOfSquares((*r)->span()).ok());
    const QueueCounters& now = (*q)->counters();
    EXPECT_EQ(now.device_syncs, 0u);
    EXPECT_EQ(now.host_waits - before.host_waits, 2u);
    if (step >= 2) {
      EXPECT_EQ(now.allocations, before.allocations);
    }
  }
}

// A buffer's release is ordered on the device: with the queue held behind
// a caller's stream blocked for 300 ms, destroying a buffer returns at once
// (cudaDeviceSynchronize would wait the 300 ms).
TEST(CudaSteady, ABuffersReleaseDoesNotWaitForTheDevice) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<Backend> cuda = MakeCudaBackend();
  DeviceVec d_data(std::vector<float>(1024, 1.0f));
  absl::StatusOr<std::unique_ptr<Queue>> q = cuda->NewQueue(d_data.span().data());
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::unique_ptr<Buffer>> b = (*q)->Allocate(1 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  cudaStream_t caller = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(
                caller, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
                nullptr),
            cudaSuccess);
  absl::StatusOr<std::shared_ptr<Event>> held =
      cuda->RecordCaller(reinterpret_cast<uintptr_t>(caller), d_data.span().data());
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE((*q)->Wait(**held).ok());
  ASSERT_TRUE((*q)->Zero((*b)->span()).ok());
  const auto start = std::chrono::steady_clock::now();
  b->reset();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(ms, 100.0) << "the release waited for the device";
  EXPECT_TRUE((*q)->Synchronize().ok());
  EXPECT_EQ((*q)->counters().device_syncs, 0u);
  cudaStreamDestroy(caller);
}

// ZeroNonFiniteLater's count rides on the selection's wait; a staged upload
// (a dense result) queues without one.
TEST(CudaSteady, DeferredCountsAndStagedUploadsAddNoWait) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<Backend> cuda = MakeCudaBackend();
  std::vector<float> grad = Values(4096, 2);
  grad[10] = INFINITY;
  grad[20] = NAN;
  DeviceVec d_grad(grad), d_out(std::vector<float>(4096, 0.0f));
  absl::StatusOr<std::unique_ptr<Queue>> q = cuda->NewQueue(d_grad.span().data());
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<std::unique_ptr<Buffer>> r = (*q)->Allocate(4096);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*q)->ZeroNonFiniteLater(d_grad.span()).ok());
  const kernels::Accumulate acc{d_grad.span().data(), nullptr, 0.0f};
  kernels::SparseVec out;
  size_t bad = 0;
  ASSERT_TRUE((*q)->SelectTopK((*r)->span(), 64, 0, &acc, nullptr, &out, &bad).ok());
  size_t first = 0;
  absl::StatusOr<size_t> count = (*q)->TakeNonFinite(&first);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 2u);
  EXPECT_EQ(first, 10u);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ((*q)->counters().host_waits, 1u);
  absl::StatusOr<std::span<float>> up = (*q)->UpStaging(4096);
  ASSERT_TRUE(up.ok());
  for (size_t i = 0; i < up->size(); ++i) (*up)[i] = static_cast<float>(i);
  ASSERT_TRUE((*q)->UploadStaged(*up, d_out.span()).ok());
  EXPECT_EQ((*q)->counters().host_waits, 1u);
  ASSERT_TRUE((*q)->Synchronize().ok());
  const std::vector<float> back = d_out.Host();
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], static_cast<float>(i));
}

// Past half the GPU's memory an allocation is refused naming the fixes; the
// pool holds what its buffers took and Trim gives it back once they went.
TEST(CudaSteady, ThePoolIsBoundedReportedAndTrimmed) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<Backend> cuda = MakeCudaBackend();
  DeviceVec d_data(std::vector<float>(16, 1.0f));
  {
    absl::StatusOr<std::unique_ptr<Queue>> q = cuda->NewQueue(d_data.span().data());
    ASSERT_TRUE(q.ok()) << q.status();
    const PoolUse use = cuda->Pools();
    ASSERT_GT(use.limit, 0u);
    absl::StatusOr<std::unique_ptr<Buffer>> huge = (*q)->Allocate(use.limit / 4 + 1);
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(huge.status().message().find("Memory::kHost"), std::string::npos);
    absl::StatusOr<std::unique_ptr<Buffer>> b = (*q)->Allocate(size_t{16} << 20);
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE((*q)->Synchronize().ok());
    EXPECT_GE(cuda->Pools().held, uint64_t{64} << 20);
  }
  cuda->Trim();
  EXPECT_EQ(cuda->Pools().held, 0u);
}

}  // namespace
}  // namespace gradex::device
