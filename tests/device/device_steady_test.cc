// The device floor's steady-step policy (device/queue.cc), the same for
// every backend, counted through the host backend: pinned staging grows
// geometrically and then never again however block sizes change, the up
// ring makes the host wait only until it fits a bucket's writes, deferred
// counts ride on a later wait, a block selection waits once for any block
// count and gives BlockTopKStep's bits, the pool's bound refuses naming the
// fixes, and a queued operation's fault surfaces at the queue's next wait.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/host_backend.h"
#include "kernels/sparse.h"
#include "kernels/topk_step.h"

namespace gradex::device {
namespace {

std::unique_ptr<Queue> NewQueue(HostBackend& backend, const void* data) {
  absl::StatusOr<std::unique_ptr<Queue>> q = backend.NewQueue(data);
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? *std::move(q) : nullptr;
}

std::vector<float> Values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// P balanced blocks of x whose sizes move by up to a third each call.
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

// 40 steps of a device bucket's queue work (the block selection, scatter-adds
// of discards, the result's COO, a factor mask) with block sizes and entry
// counts changing every step: after the first two steps no allocation outside
// the pool, no device synchronisation, and exactly one wait a step.
TEST(DeviceSteady, ChangingBlockSizesStopGrowingAfterTwoSteps) {
  constexpr size_t kN = 20000, kBlocks = 8;
  HostBackend backend;
  std::vector<float> grad = Values(kN, 1);
  std::unique_ptr<Queue> q = NewQueue(backend, grad.data());
  ASSERT_NE(q, nullptr);
  absl::StatusOr<std::unique_ptr<Buffer>> r = q->Allocate(kN);
  ASSERT_TRUE(r.ok()) << r.status();
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> jitter(0, 60);
  for (int step = 0; step < 40; ++step) {
    SCOPED_TRACE(::testing::Message() << "step " << step);
    const QueueCounters before = q->counters();
    grad = Values(kN, 100 + step);
    const std::vector<size_t> bounds = Bounds(kN, kBlocks, rng);
    std::vector<size_t> keeps;
    for (size_t b = 0; b < kBlocks; ++b) keeps.push_back((bounds[b + 1] - bounds[b]) / 100 + 1);
    const kernels::Accumulate acc{grad.data(), nullptr, 0.0f};
    std::vector<kernels::SparseVec> out;
    size_t nonfinite = 0;
    ASSERT_TRUE(
        q->SelectTopKBlocks((*r)->span(), bounds, keeps, &acc, nullptr, &out, &nonfinite).ok());
    // Discards back into the residual, the result's COO, a factor mask.
    kernels::SparseVec discards, result;
    for (const auto& o : out) {
      for (size_t i = 0; i < o.nnz(); ++i) {
        (i % 3 == 0 ? discards : result).idx.push_back(o.idx[i]);
        (i % 3 == 0 ? discards : result).val.push_back(o.val[i]);
      }
    }
    for (size_t i = 0; i < jitter(rng); ++i) {
      result.idx.push_back(static_cast<uint32_t>(kN - 1 - i));
      result.val.push_back(1.0f);
    }
    std::vector<std::pair<uint32_t, float>> sorted;
    for (size_t i = 0; i < result.nnz(); ++i) sorted.emplace_back(result.idx[i], result.val[i]);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end(),
                             [](auto a, auto b) { return a.first == b.first; }),
                 sorted.end());
    std::vector<uint32_t> idx;
    std::vector<float> val;
    for (auto [i, v] : sorted) {
      idx.push_back(i);
      val.push_back(v);
    }
    ASSERT_TRUE(q->ScatterAdd(discards, 0, 1.0f, (*r)->span()).ok());
    ASSERT_TRUE(q->SparseToDense(idx, val, grad).ok());
    ASSERT_TRUE(q->ZeroAt(idx, (*r)->span()).ok());
    ASSERT_TRUE(q->SumOfSquares((*r)->span()).ok());
    const QueueCounters& now = q->counters();
    EXPECT_EQ(now.device_syncs, 0u);
    EXPECT_EQ(now.host_waits - before.host_waits, 2u) << "the selection and the norm";
    if (step >= 2) {
      EXPECT_EQ(now.allocations, before.allocations);
    }
  }
  // Down, up: a few growths at first, each at least doubling.
  EXPECT_LE(q->counters().allocations, 6u);
  EXPECT_GE(q->counters().allocations, 2u);
}

// The up ring: the first bucket's writes overflow it (a new region for what
// the bucket asked so far, never a wait); later buckets of the same shape
// fit, and the only wait is the bucket's own.
TEST(DeviceSteady, TheUpRingWaitsOnlyUntilItFitsABucket) {
  HostBackend backend;
  std::vector<float> x(4096, 0.0f);
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  std::vector<uint32_t> idx(100);
  std::vector<float> val(100, 1.0f);
  for (int bucket = 0; bucket < 5; ++bucket) {
    SCOPED_TRACE(::testing::Message() << "bucket " << bucket);
    const QueueCounters before = q->counters();
    for (int part = 0; part < 6; ++part) {
      for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint32_t>(part * 600 + i);
      ASSERT_TRUE(q->SparseToDense(idx, val, x).ok());
    }
    absl::StatusOr<std::span<float>> dense = q->UpStaging(x.size());
    ASSERT_TRUE(dense.ok()) << dense.status();
    std::fill(dense->begin(), dense->end(), 2.0f);
    ASSERT_TRUE(q->UploadStaged(*dense, x).ok());
    EXPECT_TRUE(q->pending());
    ASSERT_TRUE(q->Synchronize().ok());  // the bucket's end
    EXPECT_FALSE(q->pending());
    const uint64_t waits = q->counters().host_waits - before.host_waits;
    EXPECT_EQ(waits, 1u) << "only the bucket's own wait";
    if (bucket > 0) {
      EXPECT_EQ(q->counters().allocations, before.allocations);
    }
  }
  EXPECT_EQ(x, std::vector<float>(x.size(), 2.0f));
  // A span UpStaging did not give is refused.
  std::vector<float> other(8);
  EXPECT_EQ(q->UploadStaged(other, std::span<float>(x).first(8)).code(),
            absl::StatusCode::kInternal);
}

// ZeroNonFiniteLater's count comes with the next wait (a selection's); with
// none in between, taking it waits once.
TEST(DeviceSteady, ADeferredCountRidesOnTheNextWait) {
  HostBackend backend;
  std::vector<float> grad = {1, NAN, 2, INFINITY, 3, 4};
  std::unique_ptr<Queue> q = NewQueue(backend, grad.data());
  ASSERT_NE(q, nullptr);
  absl::StatusOr<std::unique_ptr<Buffer>> r = q->Allocate(grad.size());
  ASSERT_TRUE(r.ok());
  size_t first = 0;
  EXPECT_EQ(q->TakeNonFinite(&first).status().code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(q->ZeroNonFiniteLater(grad).ok());
  EXPECT_EQ(q->counters().host_waits, 0u);
  const kernels::Accumulate acc{grad.data(), nullptr, 0.0f};
  kernels::SparseVec out;
  size_t nonfinite = 0;
  ASSERT_TRUE(q->SelectTopK((*r)->span(), 2, 0, &acc, nullptr, &out, &nonfinite).ok());
  EXPECT_EQ(q->counters().host_waits, 1u);
  absl::StatusOr<size_t> count = q->TakeNonFinite(&first);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 2u);
  EXPECT_EQ(first, 1u);
  EXPECT_EQ(q->counters().host_waits, 1u) << "rode on the selection's wait";
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{4, 5}));
  ASSERT_TRUE(q->ZeroNonFiniteLater(grad).ok());
  count = q->TakeNonFinite(&first);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 0u);
  EXPECT_EQ(first, grad.size());
  EXPECT_EQ(q->counters().host_waits, 2u) << "no wait came between: it waited itself";
}

// One wait for every block count, the bits and counts of BlockTopKStep (the
// reuse state follows the same thresholds; no try is made).
TEST(DeviceSteady, ABlockSelectionWaitsOnceForAnyBlockCount) {
  for (size_t blocks : {2, 4, 8}) {
    SCOPED_TRACE(::testing::Message() << blocks << " blocks");
    HostBackend backend;
    constexpr size_t kN = 5000;
    std::vector<float> grad = Values(kN, 3), velocity = Values(kN, 4);
    grad[17] = NAN;
    std::unique_ptr<Queue> q = NewQueue(backend, grad.data());
    ASSERT_NE(q, nullptr);
    absl::StatusOr<std::unique_ptr<Buffer>> r = q->Allocate(kN);
    ASSERT_TRUE(r.ok());
    std::vector<float> host(kN, 0.0f), host_velocity = velocity;
    std::vector<float> dev_velocity = velocity;
    std::mt19937 rng(11);
    std::vector<kernels::ThresholdReuse> host_reuse, dev_reuse;
    for (int step = 0; step < 3; ++step) {
      const std::vector<size_t> bounds = Bounds(kN, blocks, rng);
      std::vector<size_t> keeps;
      for (size_t b = 0; b < blocks; ++b) keeps.push_back(b == 1 ? 0 : 20 + b);
      const kernels::Accumulate host_acc{grad.data(), host_velocity.data(), 0.5f};
      const kernels::Accumulate dev_acc{grad.data(), dev_velocity.data(), 0.5f};
      std::vector<kernels::SparseVec> want, got;
      size_t want_bad = 0, got_bad = 0;
      kernels::BlockTopKStep(host.data(), bounds, keeps, 0, &host_acc, &host_reuse, true, &want,
                             &want_bad);
      const uint64_t waits = q->counters().host_waits;
      ASSERT_TRUE(
          q->SelectTopKBlocks((*r)->span(), bounds, keeps, &dev_acc, &dev_reuse, &got, &got_bad)
              .ok());
      EXPECT_EQ(q->counters().host_waits - waits, 1u);
      ASSERT_EQ(got.size(), want.size());
      for (size_t b = 0; b < blocks; ++b) {
        EXPECT_EQ(got[b].idx, want[b].idx) << "block " << b;
        EXPECT_EQ(got[b].val, want[b].val) << "block " << b;
        EXPECT_EQ(dev_reuse[b].last_key, host_reuse[b].last_key) << "block " << b;
        EXPECT_EQ(dev_reuse[b].hits + dev_reuse[b].misses(), 0u);
      }
      EXPECT_EQ(got_bad, want_bad);
      EXPECT_EQ(got_bad, 1u);
      const std::span<float> dev = (*r)->span();
      EXPECT_TRUE(std::equal(host.begin(), host.end(), dev.begin(),
                             [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }));
    }
  }
}

// Past the pool's bound an allocation is RESOURCE_EXHAUSTED naming the
// fixes; what a buffer held goes back with it.
TEST(DeviceSteady, ThePoolsBoundRefusesNamingTheFixes) {
  HostBackend backend(/*pool_limit_bytes=*/1000);
  std::vector<float> x(4);
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  absl::StatusOr<std::unique_ptr<Buffer>> a = q->Allocate(200);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(backend.Pools().held, 800u);
  absl::StatusOr<std::unique_ptr<Buffer>> b = q->Allocate(100);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string why(b.status().message());
  EXPECT_NE(why.find("half the GPU's memory"), std::string::npos) << why;
  EXPECT_NE(why.find("Memory::kHost"), std::string::npos) << why;
  EXPECT_NE(why.find("momentum_correction"), std::string::npos) << why;
  a->reset();
  EXPECT_EQ(backend.Pools().held, 0u);
  EXPECT_TRUE(q->Allocate(100).ok());
}

// A queued operation's fault (a kernel's, on a GPU) is reported by the
// queue's next wait, and kept for TakeFault whoever waited.
TEST(DeviceSteady, AQueuedFaultSurfacesAtTheNextWait) {
  HostBackend backend;
  std::vector<float> x(8, 1.0f);
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  backend.FailNext("SparseToDense", absl::InternalError("an illegal address"));
  const std::vector<uint32_t> idx = {1};
  const std::vector<float> val = {5.0f};
  ASSERT_TRUE(q->SparseToDense(idx, val, x).ok());
  EXPECT_TRUE(q->pending());
  EXPECT_EQ(q->SumOfSquares(x).status().code(), absl::StatusCode::kInternal);
  absl::Status fault = q->TakeFault();
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(fault.message(), "an illegal address");
  EXPECT_TRUE(q->TakeFault().ok()) << "taken once";
  EXPECT_TRUE(q->Synchronize().ok());
}

}  // namespace
}  // namespace gradex::device
