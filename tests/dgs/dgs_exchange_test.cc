// DGS over LoopbackTransport: three workers and one or two server shards,
// no barrier between workers, max_staleness holding a fast worker back, a
// dead worker not stopping the others, a gone server failing the workers
// within their deadline, a restart from a snapshot, a bad frame refused.
#include "ps/dgs_exchange.h"

#include <atomic>
#include <thread>

#include "tests/dgs/dgs_util.h"
#include "transport/loopback_transport.h"

namespace gradex::dgs_test {
namespace {

using std::chrono::milliseconds;

constexpr ps::DgsJob kJob{7, 3};
constexpr uint32_t kWorkers = 3;

// Shards as server threads on ranks kWorkers.. of one loopback fabric.
class Cluster {
 public:
  Cluster(const ps::DgsLayout& layout, int nshards, ps::DgsServerOptions options,
          std::vector<std::unique_ptr<transport::Transport>>* transports)
      : layout_(layout), transports_(*transports) {
    ranges_ = *layout.SplitShards(nshards);
    std::vector<int> ranks;
    for (uint32_t k = 0; k < options.workers; ++k) ranks.push_back(static_cast<int>(k));
    for (uint32_t s = 0; s < ranges_.size(); ++s) {
      shards_.push_back(std::make_unique<ps::DgsServerShard>(
          *ps::DgsServerShard::Create(layout, s, ranges_[s], options)));
      peers_.push_back({s, static_cast<int>(options.workers + s)});
      servers_.push_back(std::make_unique<ps::DgsServer>(*transports_[options.workers + s], kJob,
                                                         *shards_[s], ranks));
    }
  }
  ~Cluster() { Stop(); }
  void Start() {
    for (auto& server : servers_) {
      threads_.emplace_back([this, s = server.get()] {
        while (!stop_.load()) {
          if (!s->ServeUntil(transport::DeadlineIn(milliseconds(20))).ok()) return;
        }
      });
    }
  }
  void Stop() {
    stop_.store(true);
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }
  ps::DgsWorkerState Worker(uint32_t k, ps::DgsWorkerOptions o) {
    return *ps::DgsWorkerState::Create(layout_, k, ranges_, o);
  }
  ps::DgsPushPull Link(uint32_t k) { return ps::DgsPushPull(*transports_[k], kJob, peers_); }
  ps::DgsServerShard& shard(size_t s) { return *shards_[s]; }
  ps::DgsServer& server(size_t s) { return *servers_[s]; }
  size_t shards() const { return shards_.size(); }

 private:
  ps::DgsLayout layout_;
  std::vector<std::unique_ptr<transport::Transport>>& transports_;
  std::vector<ps::DgsRange> ranges_;
  std::vector<std::unique_ptr<ps::DgsServerShard>> shards_;
  std::vector<std::unique_ptr<ps::DgsServer>> servers_;
  std::vector<ps::DgsShardPeer> peers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

class DgsExchange : public ::testing::TestWithParam<int> {};

// Worker 2 starts only once workers 0 and 1 have finished all their steps:
// with any barrier between workers they could not finish.
TEST_P(DgsExchange, WorkersRunWithoutABarrier) {
  const ps::DgsLayout layout = MakeLayout({40, 25, 60, 3});
  auto t = transport::CreateLoopbackTransports(kWorkers + GetParam());
  Cluster c(layout, GetParam(), {.workers = kWorkers}, &t);
  c.Start();
  constexpr int kSteps = 20;
  std::atomic<int> fast_done{0};
  std::vector<std::vector<float>> params(kWorkers);
  std::vector<absl::Status> status(kWorkers);
  std::vector<ps::DgsWorkerState> states;
  // Momentum 1, lr 1, integer gradients: every value stays an integer, so
  // the shard's bookkeeping can be checked exactly at the end.
  for (uint32_t k = 0; k < kWorkers; ++k) {
    states.push_back(c.Worker(k, {.momentum = 1, .weight_decay = 0, .density = 0.1f}));
  }
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < kWorkers; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(k);
      params[k] = IntGrad(layout.total(), rng);
      ps::DgsPushPull link = c.Link(k);
      if (k == 2) {
        const transport::Deadline wait = transport::DeadlineIn(milliseconds(30000));
        while (fast_done.load() < 2 && transport::Clock::now() < wait) std::this_thread::yield();
      }
      for (int step = 0; step < kSteps && status[k].ok(); ++step) {
        ps::DgsStepStats stats;
        status[k] = link.Step(states[k], IntGrad(layout.total(), rng), params[k], 1.0f,
                              transport::DeadlineIn(milliseconds(20000)), &stats);
        if (status[k].ok() && stats.sent_bytes == 0) status[k] = absl::InternalError("no bytes");
      }
      if (k != 2) fast_done.fetch_add(1);
    });
  }
  for (std::thread& th : threads) th.join();
  c.Stop();
  for (uint32_t k = 0; k < kWorkers; ++k) EXPECT_TRUE(status[k].ok()) << k << ": " << status[k];
  for (size_t s = 0; s < c.shards(); ++s) {
    ps::DgsServerShard& sh = c.shard(s);
    EXPECT_EQ(sh.version(), kWorkers * kSteps);
    EXPECT_EQ(sh.stats().pushes, kWorkers * kSteps);
    EXPECT_EQ(sh.total_refused(), 0u);
    EXPECT_EQ(c.server(s).stats().messages_in, kWorkers * (kSteps + 1));  // + the hellos
    // Each worker's parameters plus what its shard has not sent it are M.
    for (uint32_t k = 0; k < kWorkers; ++k) {
      for (uint32_t i = 0; i < sh.range().size(); ++i) {
        ASSERT_EQ(params[k][sh.range().begin + i] + sh.unsent(k)[i], sh.model()[i])
            << "worker " << k << " shard " << s << " entry " << i;
      }
    }
  }
  // Worker 2 began after the others' 2·kSteps pushes: it was that far behind.
  EXPECT_EQ(states[2].version(0), kWorkers * kSteps);
}

INSTANTIATE_TEST_SUITE_P(Shards, DgsExchange, ::testing::Values(1, 2));

// max_staleness 2: while worker 2 idles after joining, at most two pushes
// of the others are applied; once it moves, everyone finishes.
TEST(DgsExchangeFaults, MaxStalenessMakesFastWorkersWait) {
  const ps::DgsLayout layout = MakeLayout({64});
  auto t = transport::CreateLoopbackTransports(kWorkers + 1);
  Cluster c(layout, 1, {.workers = kWorkers, .max_staleness = 2}, &t);
  c.Start();
  constexpr int kSteps = 8;
  std::atomic<int> fast_done{0};
  std::atomic<bool> joined{false};
  std::vector<absl::Status> status(kWorkers);
  std::vector<ps::DgsWorkerState> states;
  for (uint32_t k = 0; k < kWorkers; ++k) states.push_back(c.Worker(k, {.density = 0.25f}));
  uint64_t slow_first_version = 0;
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < kWorkers; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(k);
      std::vector<float> params = IntGrad(64, rng);
      ps::DgsPushPull link = c.Link(k);
      if (k == 2) {
        status[k] = link.Join(states[k], params, transport::DeadlineIn(milliseconds(20000)));
        joined.store(true);
        std::this_thread::sleep_for(milliseconds(300));
        for (int step = 0; status[k].ok() && (step < kSteps || fast_done.load() < 2); ++step) {
          status[k] = link.Step(states[k], IntGrad(64, rng), params, 0.1f,
                                transport::DeadlineIn(milliseconds(20000)));
          if (step == 0) slow_first_version = states[k].version(0);
        }
        return;
      }
      while (!joined.load()) std::this_thread::yield();
      for (int step = 0; step < kSteps && status[k].ok(); ++step) {
        status[k] = link.Step(states[k], IntGrad(64, rng), params, 0.1f,
                              transport::DeadlineIn(milliseconds(20000)));
      }
      // Done: leaving, so that the others are no longer held by this worker.
      if (status[k].ok())
        status[k] = link.Leave(states[k], transport::DeadlineIn(milliseconds(20000)));
      fast_done.fetch_add(1);
    });
  }
  for (std::thread& th : threads) th.join();
  c.Stop();
  for (uint32_t k = 0; k < kWorkers; ++k) EXPECT_TRUE(status[k].ok()) << k << ": " << status[k];
  // Worker 2's first push was applied on top of at most 2 others (and the
  // workers' joins came first: all three had joined before any push).
  EXPECT_LE(slow_first_version, 3u);
  EXPECT_GE(c.server(0).stats().held, 1u);
  EXPECT_EQ(c.shard(0).total_refused(), 0u);
  for (uint32_t k = 0; k < kWorkers; ++k) EXPECT_LE(c.shard(0).last_push_staleness(k), 2u);
}

// Worker 2 dies after 3 steps (its rank killed); the others finish, even
// under a staleness bound that the dead worker would otherwise hold.
TEST(DgsExchangeFaults, ADeadWorkerDoesNotStopTheOthers) {
  const ps::DgsLayout layout = MakeLayout({30, 30});
  auto t = transport::CreateLoopbackTransports(kWorkers + 1);
  Cluster c(layout, 1, {.workers = kWorkers, .max_staleness = 2}, &t);
  c.Start();
  std::vector<absl::Status> status(kWorkers);
  std::vector<std::thread> threads;
  for (uint32_t k = 0; k < kWorkers; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(k);
      std::vector<float> params = IntGrad(60, rng);
      ps::DgsWorkerState state = c.Worker(k, {.density = 0.2f});
      ps::DgsPushPull link = c.Link(k);
      const int steps = k == 2 ? 3 : 25;
      for (int step = 0; step < steps && status[k].ok(); ++step) {
        status[k] = link.Step(state, IntGrad(60, rng), params, 0.1f,
                              transport::DeadlineIn(milliseconds(20000)));
      }
      if (k == 2) {
        transport::KillLoopbackRank(*t[2], 2);
      } else {
        // Done: so that the other live worker is not held by this one.
        (void)link.Leave(state, transport::DeadlineIn(milliseconds(20000)));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  c.Stop();
  for (uint32_t k = 0; k < kWorkers; ++k) EXPECT_TRUE(status[k].ok()) << k << ": " << status[k];
  EXPECT_EQ(c.shard(0).version(), 53u);
  EXPECT_EQ(c.server(0).stats().workers_lost, 1u);
  EXPECT_FALSE(c.shard(0).active(2));
}

// A shard that is gone: the worker's step fails within its deadline with an
// error naming the shard (killed rank: at once; silent rank: at the deadline).
TEST(DgsExchangeFaults, AGoneServerFailsTheWorkerWithinItsDeadline) {
  const ps::DgsLayout layout = MakeLayout({16});
  auto t = transport::CreateLoopbackTransports(2);
  auto state = ps::DgsWorkerState::Create(layout, 0, {{0, 16}}, {});
  std::vector<float> params(16, 1), grad(16, 1);
  ps::DgsPushPull link(*t[0], kJob, {{0, 1}});
  transport::Clock::time_point start = transport::Clock::now();
  absl::Status s = link.Step(*state, grad, params, 0.1f, transport::DeadlineIn(milliseconds(300)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(std::string(s.message()).find("shard 0"), std::string::npos) << s;
  EXPECT_LT(transport::Clock::now() - start, milliseconds(3000));
  transport::KillLoopbackRank(*t[0], 1);
  start = transport::Clock::now();
  s = link.Step(*state, grad, params, 0.1f, transport::DeadlineIn(milliseconds(10000)));
  EXPECT_FALSE(s.ok());
  EXPECT_LT(transport::Clock::now() - start, milliseconds(3000)) << s;
  EXPECT_FALSE(state->joined(0));
  EXPECT_EQ(params, std::vector<float>(16, 1));
}

// A shard restarted from its snapshot (a new epoch: a new fabric): the
// workers' next step is refused as not joined, they rejoin, re-sync and
// push the same entries again; the model goes on from the snapshot.
TEST(DgsExchangeFaults, AShardRestartedFromASnapshotIsRejoined) {
  const ps::DgsLayout layout = MakeLayout({20, 12});
  std::vector<ps::DgsWorkerState> states;
  std::vector<std::vector<float>> params(kWorkers);
  transport::Bytes snap;
  std::vector<float> m_before;
  {
    auto t = transport::CreateLoopbackTransports(kWorkers + 1);
    Cluster c(layout, 1, {.workers = kWorkers}, &t);
    c.Start();
    for (uint32_t k = 0; k < kWorkers; ++k) {
      states.push_back(c.Worker(k, {.momentum = 1, .weight_decay = 0, .density = 1}));
      std::mt19937 rng(k);
      params[k] = IntGrad(32, rng);
    }
    std::mt19937 rng(4);
    for (int step = 0; step < 4; ++step) {
      for (uint32_t k = 0; k < kWorkers; ++k) {
        ps::DgsPushPull link = c.Link(k);
        ASSERT_TRUE(link.Step(states[k], IntGrad(32, rng), params[k], 1,
                              transport::DeadlineIn(milliseconds(20000)))
                        .ok());
      }
    }
    c.Stop();
    snap = *c.shard(0).Snapshot();
    m_before.assign(c.shard(0).model().begin(), c.shard(0).model().end());
  }
  auto t = transport::CreateLoopbackTransports(kWorkers + 1);
  Cluster c(layout, 1, {.workers = kWorkers}, &t);
  ASSERT_TRUE(c.shard(0).Restore(snap).ok());
  c.Start();
  ps::DgsPushPull link = c.Link(0);
  std::vector<float> g(32, 0);
  g[5] = 3;
  ps::DgsStepStats stats;
  ASSERT_TRUE(
      link.Step(states[0], g, params[0], 1, transport::DeadlineIn(milliseconds(20000)), &stats)
          .ok());
  c.Stop();
  EXPECT_EQ(stats.hellos, 1u);
  EXPECT_EQ(c.shard(0).version(), 13u);
  EXPECT_EQ(c.shard(0).refused()[static_cast<size_t>(ps::DgsRefusal::kNotJoined)], 1u);
  // At density 1 and momentum 1 the re-pushed entries are −(u + g) where u
  // is the worker's accumulated velocity: M moved from the snapshot by them.
  std::vector<float> want = m_before;
  for (uint32_t i = 0; i < 32; ++i) want[i] -= states[0].velocity()[i];
  EXPECT_TRUE(std::equal(want.begin(), want.end(), c.shard(0).model().begin()));
  EXPECT_EQ(params[0], want);
}

// A rogue message through the server: refused with a kRefused reply naming
// the reason, counted, never applied; the worker's next real step works.
TEST(DgsExchangeFaults, ABadFrameIsRefusedCountedAndNotApplied) {
  const ps::DgsLayout layout = MakeLayout({10});
  auto t = transport::CreateLoopbackTransports(kWorkers + 1);
  Cluster c(layout, 1, {.workers = kWorkers}, &t);
  c.Start();
  ps::DgsWorkerState state = c.Worker(1, {.density = 1});
  std::vector<float> params(10, 2);
  ps::DgsPushPull link = c.Link(1);
  ASSERT_TRUE(link.Join(state, params, transport::DeadlineIn(milliseconds(20000))).ok());
  // Worker 1's rank sends a push that names worker 0.
  ps::DgsWireContext ctx = Context(c.shard(0));
  kernels::SparseVec e;
  e.idx = {3};
  e.val = {100};
  transport::Bytes bad = *ps::EncodeDgsPush(ctx, 0, 77, 0, 1.0f, kernels::View(e));
  ASSERT_TRUE(t[1]->PostSend(kWorkers, ps::DgsUpTag(0), bad).ok());
  auto r = t[1]->PostRecv(kWorkers, ps::DgsDownTag(0));
  transport::Bytes reply;
  ASSERT_TRUE(t[1]->Wait(*r, transport::DeadlineIn(milliseconds(20000)), &reply).ok());
  ps::DgsMessage m;
  ps::DgsRefusal why;
  ctx.workers = kWorkers;
  ASSERT_TRUE(ps::DecodeDgsFromShard(reply, ctx, 1, &m, &why).ok());
  EXPECT_EQ(m.kind, ps::DgsKind::kRefused);
  EXPECT_EQ(m.reason, ps::DgsRefusal::kWrongWorker);
  EXPECT_EQ(m.request, 77u);
  ASSERT_TRUE(link.Step(state, std::vector<float>(10, 1), params, 1,
                        transport::DeadlineIn(milliseconds(20000)))
                  .ok());
  c.Stop();
  EXPECT_EQ(c.shard(0).refused()[static_cast<size_t>(ps::DgsRefusal::kWrongWorker)], 1u);
  EXPECT_EQ(c.shard(0).version(), 1u);
  EXPECT_EQ(c.shard(0).model()[3], params[3]);
  EXPECT_NE(params[3], 102.0f);
}

}  // namespace
}  // namespace gradex::dgs_test
