// gradex::ps::PsWorker (ps/ps_worker.h) with rank 0 embedding the
// coordinator and hosting the server shard: workers as threads of this test,
// real gRPC and UCX (TCP on loopback), no barrier between them.
#include "ps/ps_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <thread>

#include "tests/client/memory_rendezvous.h"

namespace gradex::client {
namespace {

ps::PsWorkerOptions Options(int rank, int world, float density, const std::string& job) {
  ps::PsWorkerOptions o;
  o.client.job = job;
  o.client.rank = rank;
  o.client.world_size = world;
  o.client.timeout = std::chrono::seconds(20);
  o.layer_sizes = {100, 37};
  o.density = density;
  return o;
}

// Runs `steps` steps on each of `world` workers at once; returns their stats
// and final parameters.
void RunWorkers(int world, float density, int steps, std::vector<ps::PsWorkerStats>* stats,
                std::vector<std::vector<float>>* params) {
  testing::MemoryStore store;
  stats->assign(world, {});
  params->assign(world, std::vector<float>(137, 0.f));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto w = ps::PsWorker::Create(Options(r, world, density, "psw"), store.rendezvous());
      ASSERT_TRUE(w.ok()) << w.status();
      std::vector<float>& p = (*params)[r];
      for (size_t i = 0; i < p.size(); ++i) p[i] = 0.01f * static_cast<float>(i % 13);
      std::vector<float> g(p.size());
      for (int s = 0; s < steps; ++s) {
        for (size_t i = 0; i < g.size(); ++i) g[i] = p[i] - 0.1f * static_cast<float>(r + 1);
        absl::Status st = (*w)->Step(g, p, 0.05f);
        ASSERT_TRUE(st.ok()) << "rank " << r << " step " << s << ": " << st;
      }
      (*stats)[r] = (*w)->Stats();
      EXPECT_TRUE((*w)->Close().ok());
    });
  }
  for (auto& t : threads) t.join();
}

TEST(PsWorkerTest, ThreeWorkersAsgdAndDgsAgainstAHostedServer) {
  for (float density : {1.0f, 0.1f}) {
    std::vector<ps::PsWorkerStats> stats;
    std::vector<std::vector<float>> params;
    RunWorkers(3, density, 20, &stats, &params);
    uint64_t newest = 0;
    for (int r = 0; r < 3; ++r) {
      const ps::PsWorkerStats& s = stats[r];
      EXPECT_EQ(s.steps, 20u) << r;
      EXPECT_EQ(s.failed_steps, 0u);
      EXPECT_GE(s.worker, 0);
      EXPECT_EQ(s.epochs_entered, 1u);
      EXPECT_GE(s.full_syncs, 1u);  // the join
      EXPECT_LE(s.version, 60u);    // one shard: every push is a version
      EXPECT_GT(s.sent_bytes, 0u);
      EXPECT_GT(s.recv_bytes, 0u);
      newest = std::max(newest, s.version);
      for (float v : params[r]) ASSERT_TRUE(std::isfinite(v));
      if (density < 1) {
        // Pushes carry the top 10% per layer at most: ceil(0.1 * 37) = 4, and
        // ceil(0.1f * 100) = 11 in float.
        EXPECT_LE(s.pushed_entries, 20u * 15u) << r;
      }
    }
    // The worker that pushed last saw every push of the job.
    EXPECT_EQ(newest, 60u) << density;
  }
}

// One slow worker (50 ms per step) and two fast ones: with max_staleness 2
// the servers hold the fast workers' pushes, so no push is applied more than
// 2 versions behind; unbounded, the slow worker's pushes fall far behind.
uint64_t SlowWorkerStaleness(uint64_t max_staleness, std::vector<ps::PsWorkerStats>* stats) {
  testing::MemoryStore store;
  stats->assign(3, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      ps::PsWorkerOptions o = Options(r, 3, 0.5f, "stale");
      o.max_staleness = max_staleness;
      auto w = ps::PsWorker::Create(o, store.rendezvous());
      ASSERT_TRUE(w.ok()) << w.status();
      std::vector<float> p(137, 0.f), g(137, 1.f);
      for (int s = 0; s < 15; ++s) {
        ASSERT_TRUE((*w)->Step(g, p, 0.01f).ok()) << r;
        if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(150));
      }
      (*stats)[r] = (*w)->Stats();
      EXPECT_TRUE((*w)->Close().ok());
    });
  }
  for (auto& t : threads) t.join();
  return (*stats)[2].max_staleness_seen;
}

TEST(PsWorkerTest, MaxStalenessMakesFastWorkersWait) {
  std::vector<ps::PsWorkerStats> stats;
  const uint64_t bounded = SlowWorkerStaleness(2, &stats);
  for (int r = 0; r < 3; ++r) EXPECT_LE(stats[r].max_staleness_seen, 2u) << r;
  const uint64_t unbounded = SlowWorkerStaleness(0, &stats);
  EXPECT_LE(bounded, 2u);
  // 150 ms per slow step against fast steps of a few ms (tens on a loaded
  // machine, where 50 ms once failed): the fast workers push many versions
  // in between when nothing holds them.
  EXPECT_GT(unbounded, 4u);
}

// Worker 2 leaves, so the job moves to a new epoch while worker 1 is busy
// between steps (4 s: an evaluation). The new epoch's wire-up needs every
// member; each PsWorker follows its epochs between steps, so worker 0 and the
// server do not wait for worker 1's next Step: worker 0 enters the new epoch
// idle, and steps 5 times before worker 1 is back.
TEST(PsWorkerTest, AWorkerBusyBetweenStepsDoesNotHoldANewEpoch) {
  testing::MemoryStore store;
  std::barrier sync(3);
  std::atomic<bool> resumed{false};
  std::vector<ps::PsWorkerStats> stats(3);
  bool zero_done_first = false;
  double zero_entered_s = -1, zero_steps_s = -1;
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      auto w = ps::PsWorker::Create(Options(r, 3, 0.5f, "follow"), store.rendezvous());
      ASSERT_TRUE(w.ok()) << w.status();
      std::vector<float> p(137, 0.f), g(137, 1.f);
      for (int s = 0; s < 3; ++s) ASSERT_TRUE((*w)->Step(g, p, 0.01f).ok()) << r;
      sync.arrive_and_wait();
      if (r == 2) {
        EXPECT_TRUE((*w)->Close().ok());
        sync.arrive_and_wait();
        return;
      }
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      auto since = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(4));
        resumed.store(true);
      } else {
        const uint32_t first = (*w)->Stats().epoch;
        while ((*w)->Stats().epoch == first && since() < 3.5) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        zero_entered_s = since();
        for (int s = 0; s < 5; ++s) ASSERT_TRUE((*w)->Step(g, p, 0.01f).ok()) << s;
        zero_steps_s = since();
        zero_done_first = !resumed.load();
      }
      for (int s = 0; s < 2; ++s) ASSERT_TRUE((*w)->Step(g, p, 0.01f).ok()) << r;
      stats[r] = (*w)->Stats();
      EXPECT_TRUE((*w)->Close().ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(zero_entered_s, 3.5) << "worker 0 never entered the new epoch between steps";
  EXPECT_TRUE(zero_done_first) << "worker 0's steps in the new epoch ended " << zero_steps_s
                               << " s in, after worker 1 came back (4 s)";
  EXPECT_EQ(stats[0].epochs_entered, 2u);
  EXPECT_GE(stats[1].epochs_entered, 2u);  // and 3 once worker 0 has left
  for (int r : {0, 1}) EXPECT_EQ(stats[r].failed_steps, 0u) << r;
}

TEST(PsWorkerTest, BadOptionsAndBadStepsAreRefused) {
  ps::PsWorkerOptions o = Options(0, 1, 0.f, "bad");
  EXPECT_EQ(ps::PsWorker::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(0, 1, 0.01f, "bad");
  o.layer_sizes = {};
  EXPECT_EQ(ps::PsWorker::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(0, 4, 0.01f, "bad");
  o.max_staleness = 1;  // below workers - 1
  auto bad = ps::PsWorker::Create(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_staleness"), std::string::npos);
  auto w = ps::PsWorker::Create(Options(0, 1, 0.5f, "one"));
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> g(136), p(137);
  EXPECT_EQ((*w)->Step(g, p, 0.1f).code(), absl::StatusCode::kInvalidArgument);
  g.resize(137);
  EXPECT_EQ((*w)->Step(g, p, -1.f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*w)->Step(g, p, 0.1f).ok());
  EXPECT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Step(g, p, 0.1f).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gradex::client
