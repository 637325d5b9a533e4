// The per-bucket rules (start_iter, min_compression_rate, dense_probe_period)
// through gradex::client::Client: ranks given different values (different hook
// arguments) run rank 0's, agreed in-band, so every step completes with the
// same algorithm and bitwise the same result on every rank; the rank whose
// own values differ counts each field once. Values out of bounds are refused
// by Client::Create.
#include <gtest/gtest.h>

#include <thread>

#include "prometheus/registry.h"
#include "services/client/client.h"
#include "services/client/client_impl.h"
#include "tests/client/client_steps.h"
#include "tests/client/memory_rendezvous.h"

namespace gradex::client {
namespace {

double Disagreements(const Client& c, const std::string& field) {
  const auto& impl = dynamic_cast<const ClientImpl&>(c);
  for (const prometheus::MetricFamily& f : impl.metrics().registry()->Collect()) {
    if (f.name != "gradex_agent_rules_disagreements_total") continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "field" && l.value == field) return m.counter.value;
      }
    }
  }
  return 0;
}

TEST(ClientRulesTest, RanksGivenDifferentRulesRunRankZeros) {
  constexpr int kWorld = 2, kSteps = 6;
  testing::MemoryStore store;
  std::vector<std::unique_ptr<Client>> clients(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o = Options(r, kWorld);
      o.timeout = std::chrono::milliseconds(10000);
      // Rank 0: sparse from step 0, no probes; rank 1: dense until step 3,
      // a probe every 2 steps. Each alone would run other algorithms.
      o.start_iter = r == 0 ? 0 : 3;
      o.dense_probe_period = r == 0 ? 0 : 2;
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
      ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
      clients[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<StepResult> results(kWorld);
    threads.clear();
    for (int r = 0; r < kWorld; ++r) {
      threads.emplace_back([&, r] { results[r] = RunStep(*clients[r], r, step, kFirstLayout); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      for (const absl::Status& s : results[r].statuses) {
        ASSERT_TRUE(s.ok()) << "rank " << r << " step " << step << ": " << s;
      }
    }
    EXPECT_EQ(results[0].spans, results[1].spans) << "step " << step;
    std::vector<BucketStats> s0 = clients[0]->Stats(), s1 = clients[1]->Stats();
    ASSERT_EQ(s0.size(), s1.size());
    for (size_t b = 0; b < s0.size(); ++b) {
      // Rank 0's rules: the plan's algorithm at every step.
      EXPECT_EQ(s0[b].algorithm, "spardl") << "step " << step;
      EXPECT_EQ(s1[b].algorithm, s0[b].algorithm) << "step " << step << " bucket " << b;
    }
  }
  EXPECT_EQ(Disagreements(*clients[1], "start_iter"), 1.0);
  EXPECT_EQ(Disagreements(*clients[1], "dense_probe_period"), 1.0);
  EXPECT_EQ(Disagreements(*clients[1], "min_compression_rate"), 0.0);
  EXPECT_EQ(Disagreements(*clients[0], "start_iter"), 0.0);
  for (int r = kWorld - 1; r >= 0; --r) (void)clients[r]->Close();
}

TEST(ClientRulesTest, RulesOutOfBoundsAreRefusedByCreate) {
  testing::MemoryStore store;
  ClientOptions o = Options(0, 1);
  o.start_iter = (uint64_t{1} << 32) + 1;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("start_iter"), std::string::npos) << c.status();
  o = Options(0, 1);
  o.min_compression_rate = 1e12;
  c = Client::Create(o, store.rendezvous());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("min_compression_rate"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace gradex::client
