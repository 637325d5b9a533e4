// Memory::kDevice: with CUDA and a GPU, a bucket in device memory is staged
// through pinned host memory and its result copied back (one rank,
// dense-ring: the result is the gradient). Without a GPU the test skips;
// without CUDA in the build, device buckets are UNIMPLEMENTED. The staging's
// byte counters, stats() and the metric run everywhere through the host
// backend (device/host_backend.h), which CI uses as a device backend.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/sparse_allreduce.h"
#include "device/device.h"
#include "device/host_backend.h"
#include "services/client/client.h"
#include "tests/client/client_harness.h"
#include "tests/client/client_steps.h"

#if GRADEX_AGENT_CUDA
#include <cuda_runtime_api.h>

#include "tests/cuda_device.h"
#endif

namespace gradex::client {

namespace {

ClientOptions OneRank() {
  ClientOptions o;
  o.job = "device-test";
  o.algorithm = "dense-ring";
  o.mean = true;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

absl::Status Exchange(Client& c, std::span<float> data, Memory m) {
  auto p = std::make_shared<std::promise<absl::Status>>();
  c.AllreduceAsync({{0, data.size()}}, data, m, true, [p](absl::Status s) { p->set_value(s); });
  return p->get_future().get();
}

const BucketStats* StatsOf(const std::vector<BucketStats>& stats, size_t elements) {
  for (const BucketStats& b : stats) {
    if (b.elements == elements) return &b;
  }
  return nullptr;
}

// kSteps steps of kFirstLayout on every client at once, rank 0's buckets in
// device memory, the others' in host memory: each rank's results into
// runs[rank], and rank 0's stats() after each step.
template <size_t kWorld>
std::vector<std::vector<BucketStats>> RunRank0OnDevice(
    std::vector<std::unique_ptr<Client>>& clients, int steps,
    std::vector<StepResult> (&runs)[kWorld]) {
  std::vector<std::vector<BucketStats>> seen(steps);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      const int rank = static_cast<int>(r);
      for (int step = 0; step < steps; ++step) {
        runs[r].push_back(RunStep(*clients[r], rank, step, kFirstLayout,
                                  r == 0 ? Memory::kDevice : Memory::kHost));
        if (r == 0) seen[step] = clients[r]->Stats();
      }
    });
  }
  for (auto& t : threads) t.join();
  return seen;
}

// Two ranks, oktopk (whose exchange reads the residual's values: no device
// local part): rank 0 passes two of its three buckets as device memory
// (staged whole, by the host copies), rank 1 all as host memory.
// The results are bitwise the same on both ranks; each staged bucket copied
// exactly its bytes each way per step (stats() per call, the metric in
// total: 2 x the bucket's bytes a step), host buckets none; the staging is
// logged once per bucket, not per step.
TEST(ClientDeviceTest, StagedBucketsCountTheirBytesEachWay) {
  constexpr int kWorld = 2, kSteps = 3;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store, [](ClientOptions& o) { o.algorithm = "oktopk"; }, &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  const std::vector<std::vector<uint64_t>>& layout = kFirstLayout;
  std::vector<std::vector<std::map<uint64_t, std::vector<float>>>> results(kWorld);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        std::vector<std::vector<float>> data(layout.size());
        std::vector<std::future<absl::Status>> done;
        for (size_t b = 0; b < layout.size(); ++b) {
          std::vector<ParamSpan> spans;
          for (uint64_t key : layout[b]) {
            std::vector<float> g = Grad(key, r, step);
            data[b].insert(data[b].end(), g.begin(), g.end());
            spans.push_back({key, kSpanSizes[key]});
          }
          const Memory m = r == 0 && b < 2 ? Memory::kDevice : Memory::kHost;
          auto p = std::make_shared<std::promise<absl::Status>>();
          done.push_back(p->get_future());
          clients[r]->AllreduceAsync(spans, data[b], m, b + 1 == layout.size(),
                                     [p](absl::Status s) { p->set_value(s); });
        }
        std::map<uint64_t, std::vector<float>> spans;
        for (size_t b = 0; b < layout.size(); ++b) {
          absl::Status s = done[b].get();
          EXPECT_TRUE(s.ok()) << "rank " << r << " step " << step << " bucket " << b << ": " << s;
          size_t at = 0;
          for (uint64_t key : layout[b]) {
            spans[key].assign(data[b].begin() + at, data[b].begin() + at + kSpanSizes[key]);
            at += kSpanSizes[key];
          }
        }
        results[r].push_back(std::move(spans));
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_EQ(results[0][step], results[1][step]) << "step " << step;
    // The result came back from the staging: it is not rank 0's gradient.
    EXPECT_NE(results[0][step].at(5), Grad(5, 0, step)) << "step " << step;
  }
  uint64_t staged_bytes = 0;
  const std::vector<BucketStats> stats0 = clients[0]->Stats(), stats1 = clients[1]->Stats();
  for (size_t b = 0; b < layout.size(); ++b) {
    size_t n = 0;
    for (uint64_t key : layout[b]) n += kSpanSizes[key];
    const BucketStats* s0 = StatsOf(stats0, n);
    const BucketStats* s1 = StatsOf(stats1, n);
    ASSERT_NE(s0, nullptr) << "bucket " << b;
    ASSERT_NE(s1, nullptr) << "bucket " << b;
    EXPECT_EQ(s0->calls, uint64_t{kSteps});
    EXPECT_EQ(s1->device_path, "host");
    EXPECT_EQ(s1->device_to_host_bytes, 0u);
    EXPECT_EQ(s1->host_to_device_bytes, 0u);
    if (b < 2) {
      EXPECT_EQ(s0->device_path, "whole-bucket staging") << "bucket " << b;
      EXPECT_EQ(s0->device_to_host_bytes, n * sizeof(float)) << "bucket " << b;
      EXPECT_EQ(s0->host_to_device_bytes, n * sizeof(float)) << "bucket " << b;
      staged_bytes += n * sizeof(float);
    } else {
      EXPECT_EQ(s0->device_path, "host");
      EXPECT_EQ(s0->device_to_host_bytes, 0u);
      EXPECT_EQ(s0->host_to_device_bytes, 0u);
    }
  }
  const std::string name = "gradex_client_device_copy_bytes_total";
  EXPECT_EQ(Counter(*clients[0], name, "direction", "device_to_host"),
            static_cast<double>(kSteps * staged_bytes));
  EXPECT_EQ(Counter(*clients[0], name, "direction", "host_to_device"),
            static_cast<double>(kSteps * staged_bytes));
  EXPECT_EQ(Counter(*clients[1], name, "direction", "device_to_host"), 0.0);
  EXPECT_EQ(Counter(*clients[1], name, "direction", "host_to_device"), 0.0);
  const std::string buckets = "gradex_client_device_buckets_total";
  EXPECT_EQ(Counter(*clients[0], buckets, "path", "whole_bucket_staging"), 2.0 * kSteps);
  EXPECT_EQ(Counter(*clients[1], buckets, "path", "whole_bucket_staging"), 0.0);
  size_t logged = 0;
  for (size_t at = log.find("whole-bucket staging"); at != std::string::npos;
       at = log.find("whole-bucket staging", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 2u) << "once per staged bucket, not per step:\n" << log;
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// Every catalog algorithm, 4 ranks, momentum correction on, 4 steps (a dense
// probe beside step 2's exchange and DDP's bucket rebuild among them): device buckets (staged by
// the host copies) end every step with the bits host buckets end it with, and leave the same
// residuals and velocities. Whichever way a device bucket's local part runs, it must keep this.
class DeviceBucketsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceBucketsTest, GiveTheBitsOfHostBuckets) {
  constexpr int kWorld = 4, kSteps = 4;
  device::HostBackend host_copies;
  std::vector<StepResult> runs[2][kWorld];  // [device?][rank]
  std::string state[2][kWorld];
  for (int device = 0; device < 2; ++device) {
    testing::MemoryStore store;
    auto clients = MakeClients(
        kWorld, store,
        [&](ClientOptions& o) {
          o.algorithm = GetParam();
          o.momentum_correction = 0.5;
          if (GetParam() == "spardl-rsag" || GetParam() == "spardl-bsag") o.teams = 2;
          // B-SAG's k' controller publishes at plan barriers the coordinator
          // sets by its clock: a pinned k' keeps the two runs' steps alike.
          if (GetParam() == "spardl-bsag") o.params["kprime"] = 8;
        },
        &host_copies);
    for (auto& c : clients) ASSERT_NE(c, nullptr);
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] {
        for (int step = 0; step < kSteps; ++step) {
          // DDP's rebuild at step 2 moves the spans between layouts (out of
          // device-held slots on the device path).
          runs[device][r].push_back(RunStep(*clients[r], r, step,
                                            step < 2 ? kFirstLayout : kRebuilt,
                                            device ? Memory::kDevice : Memory::kHost));
        }
        absl::StatusOr<std::string> blob = clients[r]->SaveState();
        EXPECT_TRUE(blob.ok()) << blob.status();
        if (blob.ok()) state[device][r] = *blob;
      });
    }
    for (auto& t : threads) t.join();
    if (device) {
      // The last step (3) is sparse: an algorithm with a device local part
      // ran it on the device, any other staged the bucket whole.
      std::unique_ptr<collectives::SparseAllreduce> a = *collectives::CreateAllreduce(GetParam());
      const std::string want = a->DeviceLocalPart() ? "device selection" : "whole-bucket staging";
      for (int r = 0; r < kWorld; ++r) {
        for (const BucketStats& b : clients[r]->Stats()) {
          EXPECT_EQ(b.device_path, want) << "rank " << r << ", bucket of " << b.elements;
        }
      }
    }
    for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
  }
  for (int r = 0; r < kWorld; ++r) {
    for (int step = 0; step < kSteps; ++step) {
      for (const absl::Status& s : runs[1][r][step].statuses) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
      // Exact float equality of integer-valued sums, and of everything the
      // steps computed from them: the same bits but for the sign of zero.
      EXPECT_EQ(runs[1][r][step].spans, runs[0][r][step].spans) << "rank " << r << " step " << step;
    }
    // The residuals and velocities (the checkpoint blob holds both).
    EXPECT_EQ(state[1][r], state[0][r]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, DeviceBucketsTest,
                         ::testing::ValuesIn(collectives::AllreduceNames()),
                         gradex::testing::AlgorithmTestName);

// Two ranks, spardl, the mean, momentum correction: rank 0 passes every
// bucket as device memory (the host backend), rank 1 as host memory. Step 0
// (u = g seeds the velocity) stages the bucket whole; steps 1 to 4 select
// where the residual lives, step 2 too: its dense probe exchanges zeros of
// the bucket's size in host memory beside the bucket's own exchange, so the
// slot stays on the device and nothing is staged or reallocated for it.
// The results are rank 1's bits at every step, and on the device steps only
// O(k) crosses PCIe per bucket: down exactly 8 bytes per selected entry (at
// most the local quotas, 1.5 k at P = 2, plus one per block), up the result's COO and the discards
// (at most 4 x 8k), plus the residual and velocity once where the bucket moves up (step 1: 2 x 4n).
// The host waits a bounded number of times per bucket.
TEST(ClientDeviceTest, DeviceSelectionMovesOnlyTheSelectedEntries) {
  constexpr int kWorld = 2, kSteps = 5;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store,
      [](ClientOptions& o) {
        o.mean = true;
        o.momentum_correction = 0.5;
      },
      &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<StepResult> runs[kWorld];
  const std::vector<std::vector<BucketStats>> seen = RunRank0OnDevice(clients, kSteps, runs);
  const double density = Options(0, kWorld).density;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : runs[r][step].statuses) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
    EXPECT_EQ(runs[0][step].spans, runs[1][step].spans) << "step " << step;
    const bool device = step >= 1;
    ASSERT_EQ(seen[step].size(), kFirstLayout.size());
    for (const BucketStats& b : seen[step]) {
      const size_t n = b.elements;
      const uint64_t k = static_cast<uint64_t>(std::ceil(density * n));
      SCOPED_TRACE(::testing::Message() << "step " << step << ", bucket of " << n);
      if (!device) {
        // Step 0 stages the gradient.
        EXPECT_EQ(b.device_path, "whole-bucket staging");
        EXPECT_EQ(b.device_to_host_bytes, n * sizeof(float));
        EXPECT_EQ(b.host_to_device_bytes, n * sizeof(float));
        EXPECT_LE(b.device_waits, 3u);
        continue;
      }
      EXPECT_EQ(b.device_path, "device selection");
      EXPECT_GT(b.device_to_host_bytes, 0u);
      EXPECT_EQ(b.device_to_host_bytes % 8, 0u);
      // At most Spar-Reduce-Scatter's largest local quotas (with
      // spardl_full_reselect a rank keeps twice the keep of the block it
      // owns at P = 2; collectives/algorithms/sparse_steps.h).
      size_t local = 0;
      for (size_t q :
           collectives::algorithms::SrsLocalKeeps(collectives::BlockLayout(n, kWorld, density), 0))
        local += q;
      EXPECT_LE(local, 2 * k);
      EXPECT_LE(b.device_to_host_bytes, 8 * (local + kWorld));
      const uint64_t moved_up = step == 1 ? 2 * n * sizeof(float) : 0;
      EXPECT_GT(b.host_to_device_bytes, moved_up);
      EXPECT_LE(b.host_to_device_bytes, moved_up + 4 * 8 * k);
      // The non-finite count, one selection per block (two waits with
      // threshold reuse) and the residual's norm; the step's upload, if any.
      EXPECT_GT(b.device_waits, 0u);
      EXPECT_LE(b.device_waits, 2u + 2 * kWorld + (step == 1 ? 2u : 0u));
    }
  }
  // The residual and velocity of each bucket, allocated once (step 1).
  EXPECT_EQ(host_copies.allocations(), 2 * kFirstLayout.size());
  const std::string buckets = "gradex_client_device_buckets_total";
  EXPECT_EQ(Counter(*clients[0], buckets, "path", "device_selection"), 4.0 * kFirstLayout.size());
  EXPECT_EQ(Counter(*clients[0], buckets, "path", "whole_bucket_staging"),
            1.0 * kFirstLayout.size());
  EXPECT_EQ(Counter(*clients[1], buckets, "path", "device_selection"), 0.0);
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// The trainer's stream and gradex's queues are ordered by events only: for
// each device bucket (given stream 7) the host backend's log holds the point
// recorded on the trainer's stream at Submit, a queue waiting for it before
// anything else of the bucket, and the trainer's stream waiting for a point
// that queue recorded after the result was written, all before the
// bucket's callback. One rank on the device, one on the host, three steps of
// one bucket (the device path, a dense probe beside it at step 2).
TEST(ClientDeviceTest, EventsOrderTheTrainersStreamBothWays) {
  constexpr int kWorld = 2, kSteps = 3;
  constexpr uintptr_t kStream = 7;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store, [](ClientOptions& o) { o.momentum_correction = 0.5; }, &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> data = Grad(0, r, step);
        auto p = std::make_shared<std::promise<absl::Status>>();
        clients[r]->AllreduceAsync(
            {{0, data.size()}}, data, r == 0 ? Memory::kDevice : Memory::kHost, true,
            [&, p](absl::Status s) {
              host_copies.Append("done");
              p->set_value(s);
            },
            r == 0 ? kStream : 0);
        absl::Status s = p->get_future().get();
        EXPECT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<std::string> log = host_copies.Log();
  std::string all;
  for (const std::string& line : log) all += line + "\n";
  SCOPED_TRACE(all);
  // Rank 1's callbacks are in the log too: walk rank 0's buckets by their
  // caller records.
  int buckets = 0;
  for (size_t i = 0; i < log.size(); ++i) {
    if (log[i].rfind("caller-record e", 0) != 0) continue;
    ++buckets;
    ASSERT_NE(log[i].find(absl::StrCat(" stream ", kStream)), std::string::npos) << log[i];
    const std::string event =
        log[i].substr(std::string("caller-record ").size(), log[i].find(' ', 14) - 14);
    // The queue's wait for it, then a queue record, then the caller's wait
    // for that record, then a callback.
    size_t j = i + 1;
    while (j < log.size() && !(log[j].find(" wait " + event) != std::string::npos &&
                               log[j].rfind("queue q", 0) == 0)) {
      ++j;
    }
    ASSERT_LT(j, log.size()) << "no queue waited for " << event;
    size_t k = j + 1;
    std::string back;
    for (; k < log.size(); ++k) {
      if (log[k].rfind("caller-wait e", 0) != 0) continue;
      back = log[k].substr(std::string("caller-wait ").size());
      back = back.substr(0, back.find(' '));
      break;
    }
    ASSERT_LT(k, log.size()) << "the trainer's stream never waited for " << event << "'s bucket";
    EXPECT_NE(log[k].find(absl::StrCat(" stream ", kStream)), std::string::npos) << log[k];
    bool recorded = false;
    for (size_t m = j; m < k; ++m)
      recorded |=
          log[m].rfind("queue q", 0) == 0 && log[m].find(" record " + back) != std::string::npos;
    EXPECT_TRUE(recorded) << back
                          << " was not recorded by a queue between the wait and the hand-back";
    bool done = false;
    for (size_t m = k; m < log.size() && !done; ++m) done = log[m] == "done";
    EXPECT_TRUE(done) << "no callback after the hand-back of " << event << "'s bucket";
  }
  EXPECT_EQ(buckets, kSteps);
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// Without momentum a device-held bucket keeps no velocity on its GPU: its
// first device step uploads nothing (a fresh residual is zeros, as its new
// buffer is) and every step only O(k). Two ranks, spardl, rank 0 on the
// device.
TEST(ClientDeviceTest, AMomentumFreeBucketKeepsNoVelocityOnTheDevice) {
  constexpr int kWorld = 2, kSteps = 2;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store, [](ClientOptions& o) { o.dense_probe_period = 0; }, &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<StepResult> runs[kWorld];
  const std::vector<std::vector<BucketStats>> seen = RunRank0OnDevice(clients, kSteps, runs);
  const double density = Options(0, kWorld).density;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : runs[r][step].statuses) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
    EXPECT_EQ(runs[0][step].spans, runs[1][step].spans) << "step " << step;
    ASSERT_EQ(seen[step].size(), kFirstLayout.size());
    for (const BucketStats& b : seen[step]) {
      const size_t n = b.elements;
      const uint64_t k = static_cast<uint64_t>(std::ceil(density * n));
      SCOPED_TRACE(::testing::Message() << "step " << step << ", bucket of " << n);
      EXPECT_EQ(b.device_path, "device selection");
      EXPECT_GT(b.host_to_device_bytes, 0u);
      EXPECT_LE(b.host_to_device_bytes, 4 * 8 * k);
    }
  }
  // One buffer per bucket, the residual; none for a velocity.
  size_t floats = 0;
  for (const BucketStats& b : seen[0]) floats += b.elements;
  EXPECT_EQ(host_copies.allocations(), kFirstLayout.size());
  EXPECT_EQ(host_copies.allocated_floats(), floats);
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// A checkpoint reads a device-resident slot and leaves it there: after
// SaveState the next steps select on the device with no upload of the
// residual or velocity (only O(k) goes up) and nothing is reallocated.
TEST(ClientDeviceTest, ACheckpointLeavesTheSlotsOnTheDevice) {
  constexpr int kWorld = 2, kSteps = 2;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store,
      [](ClientOptions& o) {
        o.momentum_correction = 0.5;
        o.dense_probe_period = 0;
      },
      &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<StepResult> before[kWorld], after[kWorld];
  RunRank0OnDevice(clients, kSteps, before);
  const size_t allocations = host_copies.allocations();
  EXPECT_EQ(allocations, 2 * kFirstLayout.size()) << "residual and velocity, once per bucket";
  absl::StatusOr<std::string> saved = clients[0]->SaveState();
  ASSERT_TRUE(saved.ok()) << saved.status();
  const std::vector<std::vector<BucketStats>> seen = RunRank0OnDevice(clients, kSteps, after);
  const double density = Options(0, kWorld).density;
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : after[r][step].statuses) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
    for (const BucketStats& b : seen[step]) {
      SCOPED_TRACE(::testing::Message() << "step " << step << ", bucket of " << b.elements);
      EXPECT_EQ(b.device_path, "device selection");
      EXPECT_LE(b.host_to_device_bytes, 4 * 8 * std::ceil(density * b.elements));
    }
  }
  EXPECT_EQ(host_copies.allocations(), allocations);
  // The checkpoint holds the device state: loading it back is accepted.
  EXPECT_TRUE(clients[0]->LoadState(*saved).ok());
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

// A refused NaN on the device path is zeroed where the bucket lives: with
// the same NaN in both ranks' bucket {5, 4} at step 1, the device rank's
// bucket fails with the host rank's error (the same span and element), and
// both get the same result, the NaN exchanged as 0.
TEST(ClientDeviceTest, ARefusedNonFiniteGradientIsZeroedOnTheDevice) {
  constexpr int kWorld = 2, kSteps = 2;
  device::HostBackend host_copies;
  testing::MemoryStore store;
  auto clients = MakeClients(
      kWorld, store, [](ClientOptions& o) { o.momentum_correction = 0.5; }, &host_copies);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::vector<std::vector<float>> result[kWorld];
  std::vector<absl::Status> status[kWorld];
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        std::vector<std::vector<float>> data(kFirstLayout.size());
        std::vector<std::future<absl::Status>> done;
        for (size_t b = 0; b < kFirstLayout.size(); ++b) {
          std::vector<ParamSpan> spans;
          for (uint64_t key : kFirstLayout[b]) {
            std::vector<float> g = Grad(key, r, step);
            data[b].insert(data[b].end(), g.begin(), g.end());
            spans.push_back({key, kSpanSizes[key]});
          }
          if (step == 1 && b == 0) data[b][7] = std::nanf("");  // span 5, element 7
          auto p = std::make_shared<std::promise<absl::Status>>();
          done.push_back(p->get_future());
          clients[r]->AllreduceAsync(spans, data[b], r == 0 ? Memory::kDevice : Memory::kHost,
                                     b + 1 == kFirstLayout.size(),
                                     [p](absl::Status s) { p->set_value(s); });
        }
        for (size_t b = 0; b < kFirstLayout.size(); ++b) {
          absl::Status s = done[b].get();
          if (step == 1 && b == 0) {
            status[r].push_back(s);
            result[r].push_back(data[b]);
          } else {
            EXPECT_TRUE(s.ok()) << "rank " << r << " step " << step << " bucket " << b << ": " << s;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(status[0].size(), 1u);
  ASSERT_EQ(status[1].size(), 1u);
  EXPECT_EQ(status[0][0].code(), absl::StatusCode::kInvalidArgument) << status[0][0];
  EXPECT_EQ(status[0][0], status[1][0]);
  EXPECT_NE(status[0][0].message().find("span 5 element 7"), std::string::npos) << status[0][0];
  EXPECT_EQ(result[0][0], result[1][0]);
  for (float v : result[0][0]) EXPECT_TRUE(std::isfinite(v));
  const std::vector<BucketStats> stats = clients[0]->Stats();
  const BucketStats* s0 = StatsOf(stats, kSpanSizes[5] + kSpanSizes[4]);
  ASSERT_NE(s0, nullptr);
  EXPECT_EQ(s0->device_path, "device selection");
  for (int r = kWorld - 1; r >= 0; --r) EXPECT_TRUE(clients[r]->Close().ok());
}

TEST(ClientDeviceTest, DeviceBucketRoundTrip) {
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(OneRank());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 13) - 6.0f;
  if (std::string(device::DefaultBackend()->name()) == "none") {
    absl::Status s = Exchange(**c, host, Memory::kDevice);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
    EXPECT_NE(s.message().find("CUDA"), std::string::npos) << s;
    return;
  }
#if GRADEX_AGENT_CUDA
  SKIP_WITHOUT_DEVICE();
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  absl::Status s = Exchange(**c, std::span<float>(d, host.size()), Memory::kDevice);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host) << "one rank, dense: the mean is the gradient";
  const std::vector<BucketStats> stats = (*c)->Stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].device_path, "whole-bucket staging");
  EXPECT_EQ(stats[0].device_to_host_bytes, host.size() * sizeof(float));
  EXPECT_EQ(stats[0].host_to_device_bytes, host.size() * sizeof(float));
  EXPECT_EQ(Counter(**c, "gradex_client_device_copy_bytes_total", "direction", "host_to_device"),
            static_cast<double>(host.size() * sizeof(float)));
  EXPECT_EQ(Counter(**c, "gradex_client_device_buckets_total", "path", "whole_bucket_staging"),
            1.0);
  // Host memory declared as device memory is refused, not read as such.
  EXPECT_EQ(Exchange(**c, host, Memory::kDevice).code(), absl::StatusCode::kInvalidArgument);
  cudaFree(d);
#endif
}

// A rank's buffer on device 1, staged by a thread whose current device is
// 0: the queue works on device 1 (the memory's; its pinned buffer belongs
// to device 1) and leaves the thread on device 0 (the caller's device is
// the caller's). Needs 2 GPUs; skips otherwise.
TEST(ClientDeviceTest, StagingFollowsThePointersDevice) {
  if (std::string(device::DefaultBackend()->name()) == "none") GTEST_SKIP() << "built without CUDA";
#if GRADEX_AGENT_CUDA
  SKIP_WITHOUT_DEVICE();
  SKIP_UNLESS_GPUS(2);
  std::vector<float> host(4096);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7);
  float* d = nullptr;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), host.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  int current = -1;
  cudaPointerAttributes pinned_attr{};
  std::vector<float> staged;
  absl::Status to_device;
  std::thread([&] {
    if (cudaSetDevice(0) != cudaSuccess) return;
    absl::StatusOr<std::unique_ptr<device::Queue>> q = device::DefaultBackend()->NewQueue(d);
    if (!q.ok()) {
      to_device = q.status();
      return;
    }
    absl::StatusOr<std::span<float>> h = (*q)->StageToHost(std::span<const float>(d, host.size()));
    if (!h.ok()) {
      to_device = h.status();
      return;
    }
    cudaGetDevice(&current);
    cudaPointerGetAttributes(&pinned_attr, h->data());
    staged.assign(h->begin(), h->end());
    for (float& x : *h) x *= 2;
    to_device = (*q)->StageToDevice(std::span<float>(d, host.size()));
    if (to_device.ok()) to_device = (*q)->Synchronize();
  }).join();
  ASSERT_TRUE(to_device.ok()) << to_device;
  EXPECT_EQ(current, 0) << "the staging left the calling thread on another device";
  EXPECT_EQ(pinned_attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(pinned_attr.device, 1) << "the pinned buffer belongs to another device";
  EXPECT_EQ(staged, host);
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), d, back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], 2 * host[i]) << i;
  cudaFree(d);
  cudaSetDevice(0);
#endif
}

}  // namespace
}  // namespace gradex::client
