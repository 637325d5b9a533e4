// Agents on nodes with the real coordinator logic (coordinator_bridge.h):
// the layout goes from the members' joins through the plan to the exchange,
// the rule hierarchy=off is agreed in-band (rank 0's), and a node is the
// failure unit: a rank killed mid-run takes its node out and the other node
// finishes, nothing of the survivors' gradients lost.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collectives/algorithms/hierarchical.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "services/coordinator/job_config.h"
#include "tests/agent/coordinator_bridge.h"
#include "tests/collectives/harness.h"

namespace gradex {
namespace {

using gradex::testing::ConservationError;
using gradex::testing::Consistent;
using gradex::testing::MakeGradient;
using gradex::testing::RankCall;
using gradex::testing::Values;

constexpr size_t kN = 4001;

coordinator::JobSettings Settings(int world) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(
      absl::StrCat(R"({"job_id":"job","world_size":)", world,
                   R"(,"algorithm":"spardl","density":0.05,"barrier_period":8,"lease_ms":400,)",
                   R"("step_deadline_ms":5000})"));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

struct Call {
  uint32_t epoch = 0;
  int world = 0;
  std::string layout;
  RankCall call;
};

// Every successful step's call by step and agent; failures by agent.
class Log {
 public:
  void Add(uint64_t step, int agent, Call c) {
    absl::MutexLock lock(&mu_);
    steps_[step][agent] = std::move(c);
  }
  std::map<uint64_t, std::map<int, Call>> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  absl::Mutex mu_;
  std::map<uint64_t, std::map<int, Call>> steps_;
};

struct Failure {
  absl::Status status;
  std::vector<float> grad, residual_in, residual_out;
};

// Runs agent `i` until it has run step `last`, or `stop(step)` says so
// before an attempt.
void Drive(pipeline::WholeStep& whole, int i, uint64_t last, Log& log,
           std::vector<Failure>* failures, const std::function<bool(uint64_t)>& stop = nullptr) {
  pipeline::Agent& a = whole.agent();
  ASSERT_TRUE(a.Start().ok());
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (a.connected() && a.next_step() > last) return;
    if (stop && stop(a.next_step())) return;
    RankCall call;
    call.grad = MakeGradient(11, i, attempt, kN, Values::kIntegers);
    call.residual_in = whole.residuals()[0];
    std::span<const float> g(call.grad);
    pipeline::StepOutcome out;
    absl::Status s = whole.Run({&g, 1}, &out);
    call.residual_out = whole.residuals()[0];
    if (!s.ok()) {
      failures->push_back({s, call.grad, call.residual_in, call.residual_out});
      ASSERT_LT(failures->size(), 4u) << s;
      continue;
    }
    call.result.assign(kN, 0.0f);
    out.results[0].ToDense(call.result);
    call.stats = out.stats[0];
    log.Add(out.step, i, {out.epoch, out.world, a.exchange_layout(), std::move(call)});
    if (out.step >= last) return;
  }
  FAIL() << "agent " << i << " did not reach step " << last;
}

// Consistency and exact conservation (integer gradients) on every step in
// [first, last] that every rank of its epoch ran; returns how many.
int CheckSteps(Log& log, uint64_t first, uint64_t last) {
  int checked = 0;
  for (auto& [step, agents] : log.steps()) {
    if (step < first || step > last) continue;
    const Call& any = agents.begin()->second;
    EXPECT_EQ(static_cast<int>(agents.size()), any.world) << "step " << step;
    std::vector<RankCall> calls;
    for (auto& [agent, c] : agents) calls.push_back(c.call);
    EXPECT_TRUE(Consistent(calls)) << "step " << step;
    EXPECT_EQ(ConservationError(calls, true), 0.0) << "step " << step;
    ++checked;
  }
  return checked;
}

std::vector<testing::BridgedAgent> MakeJob(testing::CoordinatorHub& hub,
                                           testing::LoopbackPool& pool,
                                           const std::vector<std::string>& hosts,
                                           const std::vector<member::BucketRules>& rules) {
  std::vector<testing::BridgedAgent> agents;
  for (size_t i = 0; i < hosts.size(); ++i) {
    testing::BridgedAgent b;
    b.control = std::make_unique<testing::BridgeControlPlane>(&hub);
    b.transports = std::make_unique<testing::LoopbackProvider>(&pool, absl::StrCat("addr-", i));
    pipeline::AgentOptions o = testing::TestAgentOptions(absl::StrCat("a", i));
    o.rules = rules[i];
    o.host = hosts[i];
    o.elements = kN;
    b.agent = std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), nullptr);
    b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
    agents.push_back(std::move(b));
  }
  return agents;
}

TEST(HierarchyE2E, TheLayoutGoesFromTheJoinsToTheExchange) {
  testing::CoordinatorHub hub(Settings(4));
  testing::LoopbackPool pool;
  auto agents = MakeJob(hub, pool, {"node-a", "node-a", "node-b", "node-b"},
                        std::vector<member::BucketRules>(4));
  Log log;
  std::vector<std::vector<Failure>> failures(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { Drive(*agents[i].step, i, 11, log, &failures[i]); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(CheckSteps(log, 0, 11), 12);
  for (auto& [step, calls] : log.steps()) {
    for (auto& [i, c] : calls) {
      EXPECT_EQ(c.layout, "hierarchical (2 nodes x 2 ranks)") << "agent " << i;
      EXPECT_EQ(c.call.stats.Detail(collectives::algorithms::kDetailHierarchyNodes), 2)
          << "agent " << i;
      EXPECT_GT(c.call.stats.Detail(collectives::algorithms::kDetailInterNodeSentBytes), 0)
          << "agent " << i;
      EXPECT_GT(c.call.stats.Detail(collectives::algorithms::kDetailIntraNodeSentBytes), 0)
          << "agent " << i;
    }
  }
  const catalog::NodeLayout& layout = agents[3].agent->node_layout();
  EXPECT_EQ(layout.node_of, (std::vector<int>{0, 0, 1, 1}));
  for (auto& a : agents) EXPECT_TRUE(a.agent->Leave().ok());
}

TEST(HierarchyE2E, RankZerosHierarchyRuleHoldsForEveryRank) {
  testing::CoordinatorHub hub(Settings(4));
  testing::LoopbackPool pool;
  std::vector<member::BucketRules> rules(4);
  rules[0].hierarchy = false;
  auto agents = MakeJob(hub, pool, {"node-a", "node-a", "node-b", "node-b"}, rules);
  Log log;
  std::vector<std::vector<Failure>> failures(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { Drive(*agents[i].step, i, 3, log, &failures[i]); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(CheckSteps(log, 0, 3), 4);
  // Whichever agent the coordinator made rank 0, its rule holds everywhere.
  int zero = -1;
  for (int i = 0; i < 4; ++i) {
    if (agents[i].agent->rank() == 0) zero = i;
  }
  ASSERT_GE(zero, 0);
  const std::string want =
      rules[zero].hierarchy ? "hierarchical (2 nodes x 2 ranks)" : "flat (hierarchy=off)";
  for (auto& [step, calls] : log.steps()) {
    for (auto& [i, c] : calls) {
      EXPECT_EQ(c.layout, want) << "agent " << i << " step " << step;
      EXPECT_EQ(c.call.stats.Detail(collectives::algorithms::kDetailHierarchyNodes),
                rules[zero].hierarchy ? 2 : 0);
    }
  }
  for (auto& a : agents) EXPECT_TRUE(a.agent->Leave().ok());
}

TEST(HierarchyE2E, AKilledRankTakesItsNodeOutAndTheOtherNodeFinishes) {
  testing::CoordinatorHub hub(Settings(4));
  testing::LoopbackPool pool;
  auto agents = MakeJob(hub, pool, {"node-a", "node-a", "node-b", "node-b"},
                        std::vector<member::BucketRules>(4));
  constexpr uint64_t kKillAt = 6, kLast = 15;
  Log log;
  std::vector<std::vector<Failure>> failures(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      pipeline::WholeStep& whole = *agents[i].step;
      pipeline::Agent& a = whole.agent();
      Drive(whole, i, kLast, log, &failures[i], [&, i](uint64_t step) {
        if (i == 3 && step == kKillAt) {
          // kill -9 of one rank of node b: no leave, no heartbeats.
          transport::KillLoopbackRank(*a.transport(), a.rank());
          agents[i].control->Crash();
          return true;
        }
        // Its node-mate stays alive (heartbeating) but, as torch elastic
        // restarts the node's whole worker group, runs no further step.
        return i == 2 && !failures[i].empty();
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(CheckSteps(log, 0, kKillAt - 1), static_cast<int>(kKillAt));
  // Node a's ranks failed the step once, their gradient kept whole.
  for (int i : {0, 1}) {
    ASSERT_EQ(failures[i].size(), 1u) << "agent " << i;
    const Failure& f = failures[i][0];
    for (size_t j = 0; j < kN; ++j) {
      ASSERT_EQ(f.residual_out[j], f.residual_in[j] + f.grad[j]) << "agent " << i << " at " << j;
    }
  }
  // Node a finished on its own: node b's live rank was taken out with its dead one.
  auto steps = log.steps();
  ASSERT_EQ(steps.count(kLast), 1u);
  EXPECT_EQ(steps[kLast].size(), 2u);
  for (auto& [i, c] : steps[kLast]) {
    EXPECT_EQ(c.world, 2) << "agent " << i;
    EXPECT_EQ(c.layout, "flat (one node)") << "agent " << i;
  }
  EXPECT_EQ(CheckSteps(log, kKillAt + 1, kLast), static_cast<int>(kLast - kKillAt));
  for (int i : {0, 1}) EXPECT_TRUE(agents[i].agent->Leave().ok());
}

}  // namespace
}  // namespace gradex
