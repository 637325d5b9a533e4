// The device floor's checks and counters (device/queue.cc), once for every
// backend, exercised through the host backend: sizes and indices are refused
// before a backend sees them, bytes are counted each way, and every host
// wait is counted. The host backend's log records events in order.
#include "device/host_backend.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/sparse.h"

namespace gradex::device {
namespace {

std::unique_ptr<Queue> NewQueue(HostBackend& backend, const void* data) {
  absl::StatusOr<std::unique_ptr<Queue>> q = backend.NewQueue(data);
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? *std::move(q) : nullptr;
}

TEST(HostBackend, RefusesMismatchedSizesAndIndicesOutsideTheBuffer) {
  HostBackend backend;
  std::vector<float> x(8, 1.0f);
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  std::vector<float> host(7);
  EXPECT_EQ(q->Upload(host, x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(q->CopyToHost(x, host).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> idx = {1, 8};
  const std::vector<float> val = {2.0f, 3.0f};
  EXPECT_EQ(q->SparseToDense(idx, val, x).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(q->ZeroAt(idx, x).code(), absl::StatusCode::kOutOfRange);
  kernels::SparseVec v;
  v.idx = {10, 17};
  v.val = {1.0f, 1.0f};
  // index_base 10: 17 - 10 = 7 is inside, 18 would not be.
  EXPECT_TRUE(q->ScatterAdd(v, 10, 1.0f, x).ok());
  v.idx[1] = 18;
  EXPECT_EQ(q->ScatterAdd(v, 10, 1.0f, x).code(), absl::StatusCode::kOutOfRange);
  v.idx = {9};
  v.val = {1.0f};
  EXPECT_EQ(q->ScatterAdd(v, 10, 1.0f, x).code(), absl::StatusCode::kOutOfRange);
  // Nothing refused was written.
  EXPECT_EQ(x, (std::vector<float>{2, 1, 1, 1, 1, 1, 1, 2}));
  EXPECT_EQ(q->counters().to_device_bytes, 2 * (sizeof(uint32_t) + sizeof(float)));
}

TEST(HostBackend, StagingCountsBytesAndRefusesMoreThanWasStaged) {
  HostBackend backend;
  std::vector<float> x = {1, 2, 3, 4};
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  std::vector<float> bigger(5);
  EXPECT_EQ(q->StageToDevice(bigger).code(), absl::StatusCode::kInternal);
  absl::StatusOr<std::span<float>> staged = q->StageToHost(x);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(std::vector<float>(staged->begin(), staged->end()), x);
  for (float& v : *staged) v *= 10;
  EXPECT_EQ(q->StageToDevice(bigger).code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(q->StageToDevice(x).ok());
  EXPECT_EQ(x, (std::vector<float>{10, 20, 30, 40}));
  EXPECT_EQ(q->counters().to_host_bytes, 4 * sizeof(float));
  EXPECT_EQ(q->counters().to_device_bytes, 4 * sizeof(float));
  EXPECT_EQ(q->counters().host_waits, 1u) << "the staging down waits, the copy up does not";
}

// The waits a CUDA queue makes for values, counted by the interface: one
// per value read (a count, a norm, a copy down), one for a selection with
// threshold reuse too (a device queue makes no reuse try), none for work
// that only queues (zeroing, scattering, writing a result, events).
TEST(HostBackend, CountsEveryHostWait) {
  HostBackend backend;
  std::vector<float> grad = {1, -5, 2, 0, 3, -4, 0.5f, 6};
  std::unique_ptr<Queue> q = NewQueue(backend, grad.data());
  ASSERT_NE(q, nullptr);
  absl::StatusOr<std::unique_ptr<Buffer>> r = q->Allocate(grad.size());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::vector<float>((*r)->span().begin(), (*r)->span().end()),
            std::vector<float>(grad.size(), 0.0f));
  uint64_t waits = 0;
  auto expect_waits = [&](uint64_t more, const char* what) {
    waits += more;
    EXPECT_EQ(q->counters().host_waits, waits) << what;
  };
  ASSERT_TRUE(q->Zero((*r)->span()).ok());
  expect_waits(0, "Zero");
  absl::StatusOr<size_t> nonfinite = q->Accumulate(grad, (*r)->span(), {}, 0.0f);
  ASSERT_TRUE(nonfinite.ok());
  EXPECT_EQ(*nonfinite, 0u);
  expect_waits(1, "Accumulate");
  kernels::SparseVec out;
  size_t count = 0;
  ASSERT_TRUE(q->SelectTopK((*r)->span(), 2, 0, nullptr, nullptr, &out, &count).ok());
  expect_waits(1, "SelectTopK");
  EXPECT_EQ(out.idx, (std::vector<uint32_t>{1, 7}));
  kernels::ThresholdReuse reuse;
  ASSERT_TRUE(q->SelectTopK((*r)->span(), 2, 0, nullptr, &reuse, &out, &count).ok());
  expect_waits(1, "SelectTopK with reuse");
  ASSERT_TRUE(q->ScatterAdd(out, 0, 1.0f, (*r)->span()).ok());
  expect_waits(0, "ScatterAdd");
  ASSERT_TRUE(q->SumOfSquares((*r)->span()).ok());
  expect_waits(1, "SumOfSquares");
  ASSERT_TRUE(q->ZeroNonFinite((*r)->span(), nullptr).ok());
  expect_waits(1, "ZeroNonFinite");
  absl::StatusOr<std::shared_ptr<Event>> e = q->Record();
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(q->Wait(**e).ok());
  expect_waits(0, "Record and Wait");
  ASSERT_TRUE(q->Synchronize().ok());
  expect_waits(1, "Synchronize");
  EXPECT_EQ(backend.allocations(), 1u);
  EXPECT_EQ(backend.allocated_floats(), grad.size());
}

TEST(HostBackend, LogsEventsInOrder) {
  HostBackend backend;
  std::vector<float> x(4);
  std::unique_ptr<Queue> q = NewQueue(backend, x.data());
  ASSERT_NE(q, nullptr);
  absl::StatusOr<std::shared_ptr<Event>> from = backend.RecordCaller(5, x.data());
  ASSERT_TRUE(from.ok());
  ASSERT_TRUE(q->Wait(**from).ok());
  absl::StatusOr<std::shared_ptr<Event>> back = q->Record();
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE(backend.CallerWaits(0, **back).ok());
  EXPECT_EQ(backend.Log(),
            (std::vector<std::string>{"caller-record e1 stream 5", "queue q0 wait e1",
                                      "queue q0 record e2", "caller-wait e2 stream 0"}));
  EXPECT_EQ(backend.NewQueue(nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex::device
