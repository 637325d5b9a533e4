// A device bucket's steady step, through the client and the host backend
// (device/host_backend.h, which counts what the CUDA backend would do and
// injects the faults a GPU reports): the host waits at most twice per bucket
// and step whatever the rank count, nothing synchronises the device or
// allocates outside the pool after the first two steps, dense results go up
// through pinned staging, a device fault fails the bucket that caused it and
// hands nothing back, and close() gives the pool back with the residuals
// still saved.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/host_backend.h"
#include "services/client/client.h"
#include "tests/client/client_harness.h"
#include "tests/client/client_steps.h"

namespace gradex::client {
namespace {

// `steps` steps of kFirstLayout on every client at once, rank 0's buckets in
// device memory: each rank's results, and rank 0's stats() after each step.
std::vector<std::vector<BucketStats>> RunSteps(std::vector<std::unique_ptr<Client>>& clients,
                                               int steps,
                                               std::vector<std::vector<StepResult>>* runs) {
  const int world = static_cast<int>(clients.size());
  runs->assign(world, {});
  std::vector<std::vector<BucketStats>> seen(steps);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < steps; ++step) {
        (*runs)[r].push_back(
            RunStep(*clients[r], r, step, kFirstLayout, r == 0 ? Memory::kDevice : Memory::kHost));
        if (r == 0) seen[step] = clients[r]->Stats();
      }
    });
  }
  for (auto& t : threads) t.join();
  return seen;
}

void ExpectSameResults(const std::vector<std::vector<StepResult>>& runs, int steps) {
  for (int step = 0; step < steps; ++step) {
    for (size_t r = 0; r < runs.size(); ++r) {
      for (const absl::Status& s : runs[r][step].statuses) {
        EXPECT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
    EXPECT_EQ(runs[0][step].spans, runs[1][step].spans) << "step " << step;
  }
}

// A gauge of the client's metrics registry (-1 when absent).
double Gauge(const Client& c, const std::string& name) {
  const auto& impl = dynamic_cast<const ClientImpl&>(c);
  for (const prometheus::MetricFamily& f : impl.metrics().registry()->Collect()) {
    if (f.name == name && !f.metric.empty()) return f.metric[0].gauge.value;
  }
  return -1;
}

class DeviceSteadyClientTest : public ::testing::TestWithParam<int> {};

// SparDL with its blocks re-balanced every step (their sizes change each
// call) on P ranks, momentum correction on: rank 0's buckets run on the
// device from step 1 (step 0 seeds the velocity, u = g, staged whole). Every
// bucket waits at most twice a step (the block selection, once for all P
// blocks, and the residual's norm, which also brings any fault of the
// result's writes), never synchronises the device, and after its first two
// device steps allocates nothing outside the pool; the pool holds the
// residuals and velocities. The results are rank 1's bits.
TEST_P(DeviceSteadyClientTest, WaitsPerBucketDoNotGrowWithTheRankCount) {
  const int world = GetParam();
  constexpr int kSteps = 8;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      world, store,
      [](ClientOptions& o) {
        o.dense_probe_period = 0;
        o.momentum_correction = 0.5;
        o.params["spardl_balance_tau"] = 1;
      },
      &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::vector<StepResult>> runs;
  const std::vector<std::vector<BucketStats>> seen = RunSteps(clients, kSteps, &runs);
  ExpectSameResults(runs, kSteps);
  uint64_t pool = 0;
  for (size_t n : kSpanSizes) pool += 2 * n * sizeof(float);  // residual and velocity
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_EQ(seen[step].size(), kFirstLayout.size());
    for (const BucketStats& b : seen[step]) {
      SCOPED_TRACE(::testing::Message()
                   << "P " << world << " step " << step << ", bucket of " << b.elements);
      EXPECT_EQ(b.device_syncs, 0u);
      if (step == 0) {
        EXPECT_EQ(b.device_path, "whole-bucket staging");
        EXPECT_LE(b.device_waits, 2u);
        continue;
      }
      EXPECT_EQ(b.device_path, "device selection");
      if (step == 1) {
        // The slot moves up: its residual and velocity, one wait each.
        EXPECT_LE(b.device_waits, 4u);
        continue;
      }
      EXPECT_LE(b.device_waits, 2u);
      // Two device steps (1 and 2) sized the staging.
      if (step >= 3) {
        EXPECT_EQ(b.device_allocations, 0u);
      }
      EXPECT_EQ(b.device_pool_bytes, pool);
    }
  }
  EXPECT_EQ(Gauge(*clients[0], "gradex_client_device_pool_bytes"), static_cast<double>(pool));
  for (int r = world - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(Ranks, DeviceSteadyClientTest, ::testing::Values(2, 4, 8));

// SparCML's dense split all-gather (a dense result on the device path): the
// result goes up through the queue's pinned ring, whole (4n), without a
// wait of its own or, after the first two steps, any allocation; the
// results are rank 1's bits.
TEST(DeviceSteadyClient, ADenseResultGoesUpThroughPinnedStaging) {
  constexpr int kWorld = 2, kSteps = 5;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store,
      [](ClientOptions& o) {
        o.algorithm = "sparcml-dsar-split";
        o.dense_probe_period = 0;
      },
      &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::vector<StepResult>> runs;
  const std::vector<std::vector<BucketStats>> seen = RunSteps(clients, kSteps, &runs);
  ExpectSameResults(runs, kSteps);
  for (int step = 0; step < kSteps; ++step) {
    for (const BucketStats& b : seen[step]) {
      SCOPED_TRACE(::testing::Message() << "step " << step << ", bucket of " << b.elements);
      EXPECT_EQ(b.device_path, "device selection");
      EXPECT_EQ(b.host_to_device_bytes, b.elements * sizeof(float)) << "the dense result";
      EXPECT_LE(b.device_waits, 2u);
      EXPECT_EQ(b.device_syncs, 0u);
      if (step >= 2) {
        EXPECT_EQ(b.device_allocations, 0u);
      }
    }
  }
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// A fault of a queued device operation (the result's SparseToDense, the
// factor mask's ZeroAt, a staged bucket's copy back) surfaces at the
// bucket's last wait: that bucket
// fails naming itself and the fault, the trainer's stream is not handed its
// result, and the other buckets and the next step are unaffected. A failed
// hand-back fails its bucket too.
TEST(DeviceSteadyClient, ADeviceFaultFailsItsBucketAndHandsNothingBack) {
  constexpr int kWorld = 2;
  constexpr uintptr_t kStream = 7;
  for (const char* op : {"SparseToDense", "ZeroAt", "CallerWaits", "StageToDevice"}) {
    SCOPED_TRACE(op);
    // Step 0 stages the bucket whole (u = g seeds the velocity): its copy
    // back up is the queued operation there.
    const int at = std::string(op) == "StageToDevice" ? 0 : 2;
    device::HostBackend host_copies;
    testing::MemoryStore store;
    auto clients = MakeClients(
        kWorld, store,
        [](ClientOptions& o) {
          o.dense_probe_period = 0;
          o.momentum_correction = 0.5;
        },
        &host_copies);
    for (auto& c : clients) ASSERT_NE(c, nullptr);
    const std::vector<uint64_t> spans = {0};
    std::vector<absl::Status> got(3);
    std::vector<std::vector<float>> data(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        for (int step = 0; step < 3; ++step) {
          if (r == 0 && step == at) {
            host_copies.FailNext(op, absl::InternalError(absl::StrCat("injected ", op)));
          }
          std::vector<float> g = Grad(0, r, step);
          auto p = std::make_shared<std::promise<absl::Status>>();
          std::future<absl::Status> f = p->get_future();
          clients[r]->AllreduceAsync(
              {{0, g.size()}}, g, r == 0 ? Memory::kDevice : Memory::kHost, true,
              [p](absl::Status s) { p->set_value(s); }, r == 0 ? kStream : 0);
          absl::Status s = f.get();
          if (r == 0) {
            got[step] = s;
            data[step] = g;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int step = 0; step < 3; ++step) {
      if (step != at) {
        EXPECT_TRUE(got[step].ok()) << step << ": " << got[step];
      }
    }
    ASSERT_FALSE(got[at].ok());
    const std::string why(got[at].message());
    EXPECT_EQ(got[at].code(), absl::StatusCode::kInternal) << why;
    EXPECT_NE(why.find("injected"), std::string::npos) << why;
    EXPECT_NE(why.find("spans [0]"), std::string::npos) << why;
    // Three buckets handed to stream 7 at Submit; the faulted one not back.
    int records = 0, handed = 0;
    for (const std::string& line : host_copies.Log()) {
      records += line.rfind("caller-record", 0) == 0;
      handed += line.rfind("caller-wait", 0) == 0;
    }
    EXPECT_EQ(records, 3);
    EXPECT_EQ(handed, 2);
    for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
  }
}

// close() brings device-held residuals and velocities back to host memory
// (a SaveState after it holds what one before it did), lets the queues go
// and gives the pool back (the backend's Trim).
TEST(DeviceSteadyClient, CloseGivesThePoolBack) {
  constexpr int kWorld = 2, kSteps = 3;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store,
      [](ClientOptions& o) {
        o.dense_probe_period = 0;
        o.momentum_correction = 0.5;
      },
      &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::vector<StepResult>> runs;
  (void)RunSteps(clients, kSteps, &runs);
  ExpectSameResults(runs, kSteps);
  EXPECT_GT(host_copies.Pools().held, 0u);
  absl::StatusOr<std::string> before = clients[0]->SaveState();
  ASSERT_TRUE(before.ok()) << before.status();
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
  EXPECT_EQ(host_copies.Pools().held, 0u);
  EXPECT_EQ(host_copies.trims(), 1u);
  absl::StatusOr<std::string> after = clients[0]->SaveState();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *before);
}

}  // namespace
}  // namespace gradex::client
