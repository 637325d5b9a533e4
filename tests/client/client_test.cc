// gradex::client::Client end to end in one process: clients as threads, rank 0 with
// the embedded coordinator found through an in-memory rendezvous, UCX data
// plane on loopback. Several buckets of different sizes per step and a
// DDP-style rebuild after step 1: results bitwise identical across ranks,
// mass conserved per span over the run; saved state round trips; bad
// buckets are refused; start_iter runs dense first (faults: client_faults_test).
#include "services/client/client.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <future>
#include <limits>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "services/client/saved_state.h"
#include "tests/client/client_harness.h"
#include "tests/client/client_steps.h"

namespace gradex::client {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(ClientTest, ThreeRanksRebuiltBucketsIdenticalAndConserved) {
  constexpr int kWorld = 3, kSteps = 8;
  testing::MemoryStore store;
  const std::string timeline = ::testing::TempDir() + "/gradex_client_timeline.json";
  auto clients = MakeClients(kWorld, store, [&](ClientOptions& o) { o.timeline_path = timeline; });
  ASSERT_EQ(clients.size(), 3u);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  EXPECT_EQ(clients[1]->coordinator(), clients[0]->coordinator());
  std::vector<std::vector<StepResult>> results(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        const auto t0 = Clock::now();
        results[r].push_back(RunStep(*clients[r], r, step, step == 0 ? kFirstLayout : kRebuilt));
        if (getenv("GRADEX_TEST_VERBOSE") != nullptr) {
          fprintf(stderr, "rank %d step %d: %.1f ms\n", r, step,
                  std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  // Bitwise identical on every rank, every step, every span.
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : results[r][step].statuses) ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(results[r][step].spans, results[0][step].spans) << "rank " << r << " step " << step;
    }
  }
  // Conservation per span element over the run: what the ranks gave equals
  // what the results delivered plus what the residuals still hold (exact:
  // integer values).
  std::vector<std::map<uint64_t, std::vector<float>>> residuals(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(clients[r]->Flush().ok());
    absl::StatusOr<std::string> blob = clients[r]->SaveState();
    ASSERT_TRUE(blob.ok()) << blob.status();
    absl::StatusOr<SavedState> s = DecodeState(*blob);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->step, static_cast<uint64_t>(kSteps));
    residuals[r] = s->residuals;
  }
  double nonzero_residual = 0;
  for (uint64_t key = 0; key < kSpanSizes.size(); ++key) {
    std::vector<double> given(kSpanSizes[key], 0.0);
    for (int step = 0; step < kSteps; ++step) {
      for (int r = 0; r < kWorld; ++r) {
        const std::vector<float> g = Grad(key, r, step);
        for (size_t i = 0; i < g.size(); ++i) given[i] += g[i];
      }
    }
    for (size_t i = 0; i < kSpanSizes[key]; ++i) {
      double delivered = 0, kept = 0;
      for (int step = 0; step < kSteps; ++step) delivered += results[0][step].spans.at(key)[i];
      for (int r = 0; r < kWorld; ++r) kept += residuals[r].at(key)[i];
      nonzero_residual += kept != 0;
      ASSERT_EQ(given[i], delivered + kept) << "span " << key << " element " << i;
    }
  }
  EXPECT_GT(nonzero_residual, 0) << "density 0.05 must leave residuals";
  // Stats: the rebuilt layouts ran, a dense probe among them.
  std::vector<BucketStats> stats = clients[0]->Stats();
  EXPECT_EQ(stats.size(), kFirstLayout.size() + kRebuilt.size());
  uint64_t dense = 0;
  for (const BucketStats& b : stats) {
    dense += b.dense_calls;
    if (b.calls > 2) EXPECT_GT(b.dense_s, 0.0) << "the probes' timings";
  }
  EXPECT_EQ(dense, 0u) << "steps 2 and 5 probe dense beside the sparse exchange";
  EXPECT_EQ(Counter(*clients[0], "gradex_client_dense_probes_total"), 2.0 * kRebuilt.size());
  EXPECT_EQ(Counter(*clients[0], "gradex_client_buckets_total", "outcome", "ok"), 3.0 * kSteps);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_buckets_total", "outcome", "failed"), 0.0);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_algorithm_switches_total", "to", "dense"), 0.0)
      << "probes are not switches";
  for (int r = kWorld - 1; r >= 0; --r) {  // rank 0, the coordinator's, last
    Client* c = clients[r].get();
    const auto t0 = Clock::now();
    absl::Status s = c->Close();
    EXPECT_TRUE(s.ok()) << s;
    if (getenv("GRADEX_TEST_VERBOSE") != nullptr) {
      fprintf(stderr, "close: %.1f ms\n",
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  // The timeline of rank 0 parses as JSON and holds 6 events per bucket
  // (queue, selection, wait, exchange, communication, reduction).
  const std::string path0 = ::testing::TempDir() + "/gradex_client_timeline.rank0.json";
  const std::string cmd = absl::StrCat(
      "python3 -c \"import json,sys; e=json.load(open('", path0,
      "')); sys.exit(0 if sum(1 for x in e if x.get('ph')=='X')==", 6 * 3 * kSteps, " else 1)\"");
  if (std::system("python3 -c 'import json' 2>/dev/null") == 0) {
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
}

TEST(ClientTest, SaveLoadRoundTripAndCorruptBlobRefused) {
  testing::MemoryStore store;
  ClientOptions o = Options(0, 1);
  o.density = 0.1;
  o.dense_probe_period = 0;
  absl::StatusOr<std::unique_ptr<Client>> a = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(a.ok()) << a.status();
  for (int step = 0; step < 3; ++step) {
    for (const absl::Status& s : RunStep(**a, 0, step, kRebuilt).statuses) ASSERT_TRUE(s.ok()) << s;
  }
  absl::StatusOr<std::string> blob = (*a)->SaveState();
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(DecodeState(*blob).ok());
  EXPECT_EQ(DecodeState(*blob)->step, 3u);
  EXPECT_EQ(DecodeState(*blob)->residuals.size(), kSpanSizes.size());
  ASSERT_TRUE((*a)->Close().ok());

  testing::MemoryStore store2;
  absl::StatusOr<std::unique_ptr<Client>> b = Client::Create(o, store2.rendezvous());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->LoadState(*blob).ok());
  EXPECT_EQ((*b)->step(), 3u);
  EXPECT_EQ(*(*b)->SaveState(), *blob);
  std::string bad = *blob;
  bad[bad.size() / 2] ^= 1;
  absl::Status s = (*b)->LoadState(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ((*b)->LoadState(blob->substr(0, 30)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->LoadState("not a state").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*(*b)->SaveState(), *blob) << "a refused blob changes nothing";
  // The loaded residuals are used: the next step runs from step 3.
  for (const absl::Status& st : RunStep(**b, 0, 3, kRebuilt).statuses) EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ((*b)->step(), 4u);
}

// Momentum correction lives with the residual: the velocity of each span
// follows it through DDP's rebuild and a checkpoint. One rank, dense-ring
// with the mean: the result is exactly what was exchanged, the velocity.
// A refused non-finite gradient value is zeroed before the momentum
// correction: the velocity takes m*u + 0 there, never the NaN or Inf.
TEST(ClientTest, ARefusedNonFiniteGradientNeverReachesTheVelocity) {
  constexpr float kM = 0.5f;
  ClientOptions o = Options(0, 1);
  o.algorithm = "spardl";
  o.momentum_correction = kM;
  o.refuse_nonfinite = true;
  o.dense_probe_period = 0;
  testing::MemoryStore store;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(c.ok()) << c.status();
  auto step = [&](std::vector<float> g) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    (*c)->AllreduceAsync({{0, g.size()}}, g, Memory::kHost, true,
                         [p](absl::Status s) { p->set_value(s); });
    return p->get_future().get();
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g(400, 0.25f);
  EXPECT_TRUE(step(g).ok());  // a span's first step: u = g
  g[7] = nan;
  g[9] = -inf;
  (void)step(g);  // the refused values are counted; the step's status is not the point
  (void)step(std::vector<float>(400, 0.25f));  // the fused form afterwards
  absl::StatusOr<std::string> blob = (*c)->SaveState();
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<SavedState> saved = DecodeState(*blob);
  ASSERT_TRUE(saved.ok()) << saved.status();
  for (float v : saved->velocities.at(0)) ASSERT_TRUE(std::isfinite(v)) << v;
  for (float r : saved->residuals.at(0)) ASSERT_TRUE(std::isfinite(r)) << r;
}

TEST(ClientTest, MomentumVelocitySurvivesRebuildAndCheckpoint) {
  constexpr float kM = 0.75f;
  ClientOptions o = Options(0, 1);
  o.algorithm = "dense-ring";
  o.momentum_correction = kM;
  const std::map<uint64_t, size_t> sizes = {{0, 3}, {1, 2}};
  // One bucket (layout of spans) through the client; returns its result.
  auto step = [](Client& c, std::vector<ParamSpan> spans, std::vector<float> g) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    c.AllreduceAsync(spans, g, Memory::kHost, true, [p](absl::Status s) { p->set_value(s); });
    EXPECT_TRUE(p->get_future().get().ok());
    return g;
  };
  auto next = [](float u, float g) {
    volatile float scaled = u * kM;  // two roundings, as torch's mul_ then add_
    return scaled + g;
  };
  testing::MemoryStore store;
  absl::StatusOr<std::unique_ptr<Client>> a = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(a.ok()) << a.status();
  // Step 0: spans 0 and 1 in one bucket; a span's first step takes u = g.
  const std::vector<float> g0 = {1.5f, -2.25f, 3.0f, 0.125f, -7.0f};
  EXPECT_EQ(step(**a, {{0, 3}, {1, 2}}, g0), g0);
  // Step 1, rebuilt: span 1 alone, then span 0; u = m*u + g.
  std::vector<float> u = g0;
  const std::vector<float> g1 = {0.3f, 0.7f, -1.1f, 2.9f, 0.01f};
  for (size_t i = 0; i < u.size(); ++i) u[i] = next(u[i], g1[i]);
  EXPECT_EQ(step(**a, {{1, 2}}, {g1[3], g1[4]}), (std::vector<float>{u[3], u[4]}));
  EXPECT_EQ(step(**a, {{0, 3}}, {g1[0], g1[1], g1[2]}), (std::vector<float>{u[0], u[1], u[2]}));
  absl::StatusOr<std::string> blob = (*a)->SaveState();
  ASSERT_TRUE(blob.ok()) << blob.status();
  absl::StatusOr<SavedState> saved = DecodeState(*blob);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->velocities.at(0), (std::vector<float>{u[0], u[1], u[2]}));
  EXPECT_EQ(saved->velocities.at(1), (std::vector<float>{u[3], u[4]}));
  ASSERT_TRUE((*a)->Close().ok());

  // Restored into a new client, the next step continues from the velocity.
  testing::MemoryStore store2;
  absl::StatusOr<std::unique_ptr<Client>> b = Client::Create(o, store2.rendezvous());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*b)->LoadState(*blob).ok());
  EXPECT_EQ(*(*b)->SaveState(), *blob);
  const std::vector<float> g2 = {-0.5f, 4.0f, 0.25f, 1.0f, -3.5f};
  for (size_t i = 0; i < u.size(); ++i) u[i] = next(u[i], g2[i]);
  EXPECT_EQ(step(**b, {{0, 3}, {1, 2}}, g2), u);
}

TEST(ClientTest, BadBucketsAreRefusedClearly) {
  testing::MemoryStore store;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(Options(0, 1), store.rendezvous());
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<float> x(10, 1.0f);
  auto run = [&](std::vector<ParamSpan> spans, Memory m) {
    auto p = std::make_shared<std::promise<absl::Status>>();
    (*c)->AllreduceAsync(spans, x, m, true, [p](absl::Status s) { p->set_value(s); });
    return p->get_future().get();
  };
  EXPECT_EQ(run({{1, 9}}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({{1, 5}, {1, 5}}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run({}, Memory::kHost).code(), absl::StatusCode::kInvalidArgument);
  // Host memory passed as device memory: refused (no CUDA build, or not a
  // device pointer), the data untouched.
  absl::Status d = run({{1, 10}}, Memory::kDevice);
  EXPECT_TRUE(d.code() == absl::StatusCode::kUnimplemented ||
              d.code() == absl::StatusCode::kInvalidArgument)
      << d;
  EXPECT_EQ(x, std::vector<float>(10, 1.0f));
  EXPECT_TRUE(run({{1, 10}}, Memory::kHost).ok());
  // Flush and Close from a done callback would wait for their own thread.
  auto p = std::make_shared<std::promise<std::pair<absl::Status, absl::Status>>>();
  Client* raw = c->get();
  raw->AllreduceAsync({{1, 10}}, x, Memory::kHost, true, [p, raw](absl::Status) {
    p->set_value({raw->Flush(), raw->Close()});
  });
  auto [flush, close] = p->get_future().get();
  EXPECT_EQ(flush.code(), absl::StatusCode::kFailedPrecondition) << flush;
  EXPECT_EQ(close.code(), absl::StatusCode::kFailedPrecondition) << close;
  // Options are checked before anything starts.
  ClientOptions o = Options(0, 1);
  o.algorithm = "nope";
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(2, 2);
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(0, 1);
  o.density = 0;
  EXPECT_EQ(Client::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// A rank killed (SIGKILL, a process of its own) while the others wait for
// it in a step: every survivor's bucket fails with a clear error within the
// timeout, and nothing hangs.

TEST(ClientTest, StartIterRunsDenseThenSwitchesOnceCountedAndLogged) {
  testing::MemoryStore store;
  ClientOptions o = Options(0, 1);
  o.start_iter = 2;
  o.dense_probe_period = 0;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
  ASSERT_TRUE(c.ok()) << c.status();
  for (int step = 0; step < 4; ++step) {
    std::vector<float> x = Grad(0, 0, step);
    ASSERT_TRUE((*c)->AllreduceAsync(0, x).get().ok());
    std::vector<BucketStats> stats = (*c)->Stats();
    ASSERT_EQ(stats.size(), 1u);
    EXPECT_EQ(stats[0].algorithm, step < 2 ? "dense-ring" : "spardl") << step;
  }
  const BucketStats b = (*c)->Stats()[0];
  EXPECT_EQ(b.calls, 4u);
  EXPECT_EQ(b.dense_calls, 2u);
  EXPECT_EQ(b.fallback_switches, 1u);
  EXPECT_GT(b.dense_s, 0.0);
  EXPECT_GT(b.sparse_s, 0.0);
  EXPECT_GT(b.residual_norm, 0.0);
  // One rank, one block: spardl's first call has no threshold to reuse, its
  // second tries once.
  EXPECT_EQ(b.threshold_reuse_hits + b.threshold_reuse_misses, 1u);
  EXPECT_EQ(Counter(**c, "gradex_agent_topk_threshold_reuse_total", "outcome", "hit") +
                Counter(**c, "gradex_agent_topk_threshold_reuse_total", "outcome", "miss"),
            1.0);
  EXPECT_EQ(Counter(**c, "gradex_client_algorithm_switches_total", "to", "sparse"), 1.0);
  EXPECT_EQ(Counter(**c, "gradex_client_algorithm_switches_total", "to", "dense"), 0.0);
}

}  // namespace
}  // namespace gradex::client
