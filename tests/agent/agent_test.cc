// Agents as threads of one process over the fake control plane and loopback
// communicators: invariants on every step, a crash mid-run, plan changes at
// their effective step, a late joiner, and report back-pressure.
#include "pipeline/agent.h"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "pipeline/whole_step.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/harness.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex {
namespace {

using gradex::testing::ConservationError;
using gradex::testing::Consistent;
using gradex::testing::MakeGradient;
using gradex::testing::RankCall;
using gradex::testing::Values;
using std::chrono::milliseconds;

constexpr size_t kN = 3001;

member::Plan BasePlan(const std::string& algorithm, int teams) {
  member::Plan p;
  p.algorithm = algorithm;
  p.density = 0.05;
  p.teams = teams;
  p.tau = 8;
  p.step_deadline = milliseconds(5000);
  return p;
}

struct Box {
  std::unique_ptr<testing::FakeControlPlane> control;
  std::unique_ptr<testing::LoopbackProvider> transports;
  std::unique_ptr<pipeline::AgentMetrics> metrics;
  std::unique_ptr<pipeline::Agent> agent;
  std::unique_ptr<pipeline::WholeStep> step;  // the agent's whole steps, made with it
};

Box MakeAgent(testing::FakeCoordinator& coordinator, testing::LoopbackPool& pool,
              const std::string& id, size_t report_capacity = 64) {
  Box b;
  b.control = std::make_unique<testing::FakeControlPlane>(&coordinator, report_capacity);
  b.transports = std::make_unique<testing::LoopbackProvider>(&pool, "addr-" + id);
  b.metrics = std::make_unique<pipeline::AgentMetrics>();
  pipeline::AgentOptions o = testing::TestAgentOptions(id);
  o.elements = kN;
  b.agent =
      std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), b.metrics.get());
  b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
  return b;
}

// Every call of every rank, by step and rank.
struct Record {
  uint32_t epoch = 0;
  int world = 0;
  uint64_t plan_version = 0;
  double density = 0;
  collectives::CallStats stats;
  RankCall call;
};

class Recorder {
 public:
  void Add(uint64_t step, int rank, Record r) {
    absl::MutexLock lock(&mu_);
    steps_[step][rank] = std::move(r);
  }
  std::map<uint64_t, std::map<int, Record>> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  absl::Mutex mu_;
  std::map<uint64_t, std::map<int, Record>> steps_;
};

// Runs `agent` until it has run step `last`. before(step) runs before each
// attempt and may stop the agent (returns false). Failed attempts are
// recorded in `failures` with their residual before and after.
struct Failure {
  absl::Status status;
  double seconds = 0;
  std::vector<float> grad, residual_in, residual_out;
};

void Drive(Box& box, int seed_rank, uint64_t last, Recorder& rec, std::vector<Failure>* failures,
           const std::function<bool(uint64_t)>& before = nullptr) {
  pipeline::WholeStep& whole = *box.step;
  pipeline::Agent& a = whole.agent();
  ASSERT_TRUE(a.Start().ok());
  for (int attempt = 0; attempt < 400; ++attempt) {
    if (a.connected() && a.next_step() > last) return;
    if (before && !before(a.next_step())) return;
    RankCall call;
    call.grad = MakeGradient(7, seed_rank, attempt, kN, Values::kGrid);
    call.residual_in = whole.residuals()[0];
    std::span<const float> g(call.grad);
    pipeline::StepOutcome out;
    const auto t0 = transport::Clock::now();
    absl::Status s = whole.Run({&g, 1}, &out);
    call.residual_out = whole.residuals()[0];
    if (!s.ok()) {
      ASSERT_NE(failures, nullptr) << s;
      failures->push_back({s, std::chrono::duration<double>(transport::Clock::now() - t0).count(),
                           call.grad, call.residual_in, call.residual_out});
      ASSERT_LT(failures->size(), 5u) << s;
      continue;
    }
    call.result.assign(kN, 0.0f);
    out.results[0].ToDense(call.result);
    call.stats = out.stats[0];
    rec.Add(out.step, out.rank,
            {out.epoch, out.world, out.plan_version, out.density, out.stats[0], std::move(call)});
    if (out.step >= last) return;
  }
  FAIL() << "agent did not reach step " << last;
}

// Consistency and conservation on every step that every rank of its epoch ran.
void CheckInvariants(Recorder& rec, uint64_t first, uint64_t last, int* checked) {
  for (auto& [step, ranks] : rec.steps()) {
    if (step < first || step > last) continue;
    const Record& any = ranks.begin()->second;
    ASSERT_EQ(static_cast<int>(ranks.size()), any.world) << "step " << step;
    std::vector<RankCall> calls;
    for (auto& [rank, r] : ranks) {
      EXPECT_EQ(r.epoch, any.epoch) << "step " << step;
      EXPECT_LE(r.stats.result_nnz, r.stats.result_capacity) << "step " << step;
      calls.push_back(r.call);
    }
    EXPECT_TRUE(Consistent(calls)) << "step " << step;
    EXPECT_LT(ConservationError(calls, /*relative=*/true), 1e-5) << "step " << step;
    ++*checked;
  }
}

testing::FakeJobConfig Job(int world, const std::string& algorithm, int teams) {
  testing::FakeJobConfig c;
  c.world_size = world;
  c.lease = milliseconds(400);
  c.base = BasePlan(algorithm, teams);
  return c;
}

TEST(AgentTest, FourAgentsRunFiftyStepsOfBsagWithInvariants) {
  testing::FakeCoordinator coordinator(Job(4, "spardl-bsag", 2));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(coordinator, pool, absl::StrCat("a", i)));
  Recorder rec;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { Drive(boxes[i], i, 49, rec, nullptr); });
  }
  for (auto& t : threads) t.join();
  int checked = 0;
  CheckInvariants(rec, 0, 49, &checked);
  EXPECT_EQ(checked, 50);
  for (auto& [step, ranks] : rec.steps()) {
    for (auto& [rank, r] : ranks) {
      EXPECT_EQ(r.epoch, 1u);
      EXPECT_GT(r.stats.Detail("kprime_used"), 0u) << "B-SAG ran with teams";
    }
  }
  // Reports reach the coordinator asynchronously.
  for (int i = 0; i < 200 && coordinator.reports_received() < 200; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(coordinator.reports_received(), 200u);
}

TEST(AgentTest, KilledAgentFailsSurvivorsFastAndNextEpochRunsToTheEnd) {
  testing::FakeCoordinator coordinator(Job(4, "spardl-bsag", 2));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(coordinator, pool, absl::StrCat("a", i)));
  Recorder rec;
  std::vector<std::vector<Failure>> failures(4);
  constexpr uint64_t kKillAt = 21, kLast = 49;
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto before = [&, i](uint64_t step) {
        if (i != 2 || step != kKillAt) return true;
        // kill -9: no leave, no more heartbeats, connections gone.
        pipeline::WholeStep& whole = *boxes[i].step;
        pipeline::Agent& a = whole.agent();
        transport::KillLoopbackRank(*a.transport(), a.rank());
        boxes[i].control->Crash();
        return false;
      };
      Drive(boxes[i], i, kLast, rec, &failures[i], before);
    });
  }
  for (auto& t : threads) t.join();

  for (int i : {0, 1, 3}) {
    ASSERT_EQ(failures[i].size(), 1u) << "agent " << i;
    const Failure& f = failures[i][0];
    EXPECT_EQ(f.status.code(), absl::StatusCode::kUnavailable) << f.status;
    EXPECT_NE(f.status.message().find(absl::StrCat("step ", kKillAt)), std::string::npos)
        << f.status;
    EXPECT_LT(f.seconds, 5.0) << "within the step deadline";
    // The failed step's gradient is kept whole in the residual.
    for (size_t j = 0; j < kN; ++j) {
      ASSERT_EQ(f.residual_out[j], f.residual_in[j] + f.grad[j]) << "agent " << i << " at " << j;
    }
  }
  EXPECT_GE(coordinator.evictions(), 1);
  int checked = 0;
  CheckInvariants(rec, 0, kKillAt - 1, &checked);
  EXPECT_EQ(checked, static_cast<int>(kKillAt));
  checked = 0;
  CheckInvariants(rec, kKillAt + 1, kLast, &checked);
  EXPECT_EQ(checked, static_cast<int>(kLast - kKillAt));
  auto steps = rec.steps();
  ASSERT_EQ(steps.count(kLast), 1u);
  for (auto& [rank, r] : steps[kLast]) {
    EXPECT_EQ(r.world, 3);
    EXPECT_EQ(r.epoch, 2u);
  }
}

TEST(AgentTest, PlanChangesApplyAtTheirEffectiveStepOnEveryRank) {
  testing::FakeCoordinator coordinator(Job(4, "spardl-bsag", 2));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(coordinator, pool, absl::StrCat("a", i)));
  Recorder rec;
  constexpr uint64_t kPause = 10, kEffective = 16, kLast = 31;
  constexpr size_t kKPrime = 7;
  std::barrier sync(5);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      Drive(boxes[i], i, kLast, rec, nullptr, [&](uint64_t step) {
        if (step == kPause) {
          sync.arrive_and_wait();  // the coordinator publishes here
          sync.arrive_and_wait();
        }
        return true;
      });
    });
  }
  sync.arrive_and_wait();
  // A barrier value (density) at a future barrier, and k' (applied at once).
  coordinator.UpdatePlan([](member::Plan& p) { p.density = 0.2; }, kEffective);
  coordinator.UpdatePlan([](member::Plan& p) { p.kprime = {{kKPrime, kKPrime}}; }, kEffective);
  sync.arrive_and_wait();
  for (auto& t : threads) t.join();
  int checked = 0;
  CheckInvariants(rec, 0, kLast, &checked);
  EXPECT_EQ(checked, static_cast<int>(kLast + 1));
  for (auto& [step, ranks] : rec.steps()) {
    for (auto& [rank, r] : ranks) {
      EXPECT_EQ(r.density, step < kEffective ? 0.05 : 0.2) << "step " << step << " rank " << rank;
      if (step >= kPause) {
        EXPECT_EQ(r.stats.Detail("kprime_used"), kKPrime) << "step " << step;
      } else {
        EXPECT_NE(r.stats.Detail("kprime_used"), kKPrime) << "step " << step;
      }
    }
  }
}

TEST(AgentTest, LateJoinerIsAdmittedAtABarrier) {
  testing::FakeCoordinator coordinator(Job(3, "spardl", 1));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(coordinator, pool, absl::StrCat("a", i)));
  Recorder rec;
  constexpr uint64_t kLast = 40;
  std::atomic<bool> late_may_start{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      Drive(boxes[i], i, kLast, rec, nullptr, [&](uint64_t step) {
        if (step == 5) late_may_start.store(true);
        return true;
      });
    });
  }
  threads.emplace_back([&] {
    while (!late_may_start.load()) std::this_thread::sleep_for(milliseconds(1));
    Drive(boxes[3], 3, kLast, rec, nullptr);
  });
  for (auto& t : threads) t.join();
  int checked = 0;
  CheckInvariants(rec, 0, kLast, &checked);
  EXPECT_EQ(checked, static_cast<int>(kLast + 1));
  uint64_t first4 = ~uint64_t{0};
  for (auto& [step, ranks] : rec.steps()) {
    if (ranks.begin()->second.world == 4) first4 = std::min(first4, step);
  }
  ASSERT_NE(first4, ~uint64_t{0}) << "the late joiner never ran";
  EXPECT_EQ(first4 % 8, 0u) << "admitted at a plan barrier, step " << first4;
  EXPECT_EQ(rec.steps()[kLast].size(), 4u);
}

TEST(AgentTest, FullReportQueueDropsWithoutBlockingSteps) {
  testing::FakeCoordinator coordinator(Job(1, "spardl", 1));
  testing::LoopbackPool pool;
  Box box = MakeAgent(coordinator, pool, "solo", /*report_capacity=*/4);
  box.control->PauseReports(true);
  Recorder rec;
  const auto t0 = transport::Clock::now();
  Drive(box, 0, 29, rec, nullptr);
  const double took = std::chrono::duration<double>(transport::Clock::now() - t0).count();
  EXPECT_LT(took, 10.0);
  EXPECT_EQ(box.control->report_drops(), 26u) << "30 reports, 4 queued";
  box.control->PauseReports(false);
  for (int i = 0; i < 200 && coordinator.reports_received() < 4; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(coordinator.reports_received(), 4u);
}

}  // namespace
}  // namespace gradex
