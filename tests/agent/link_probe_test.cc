// The link probe on loopback communicators (estimates, a dead or absent peer,
// P=1), agents that probe at the epoch's start and report the estimate, and
// a team-count change at a barrier inside an epoch with the invariants held.
#include "member/link_probe.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collectives/link.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/harness.h"
#include "tests/fakes/fake_control_plane.h"
#include "transport/loopback_transport.h"

namespace gradex {
namespace {

using gradex::testing::ConservationError;
using gradex::testing::Consistent;
using gradex::testing::MakeGradient;
using gradex::testing::RankCall;
using gradex::testing::RunRanks;
using gradex::testing::Values;
using std::chrono::milliseconds;

double Since(transport::Clock::time_point t) {
  return std::chrono::duration<double>(transport::Clock::now() - t).count();
}

TEST(LinkProbeTest, FourRanksGetPositiveFiniteEstimates) {
  absl::Mutex mu;
  std::vector<member::LinkEstimate> got(4);
  std::vector<absl::Status> st =
      RunRanks(4, [&](int rank, transport::Transport& t) -> absl::Status {
        absl::StatusOr<member::LinkEstimate> e =
            member::ProbeLinks(t, 3, transport::DeadlineIn(milliseconds(20000)));
        if (!e.ok()) return e.status();
        absl::MutexLock lock(&mu);
        got[rank] = *e;
        return absl::OkStatus();
      });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_GT(got[r].alpha_s, 0) << r;
    EXPECT_LT(got[r].alpha_s, 10) << r;
    EXPECT_TRUE(std::isfinite(got[r].beta_s_per_byte)) << r;
    EXPECT_GE(got[r].beta_s_per_byte, 0) << r;
    EXPECT_LT(got[r].beta_s_per_byte, 1e-3) << r;
    EXPECT_EQ(got[r].samples, 5u);
  }
}

TEST(LinkProbeTest, OneRankHasNothingToProbe) {
  auto t = transport::CreateLoopbackTransports(1);
  EXPECT_EQ(member::ProbeLinks(*t[0], 1, transport::DeadlineIn(milliseconds(1000))).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(LinkProbeTest, DeadPeerFailsBeforeTheDeadline) {
  auto t = transport::CreateLoopbackTransports(3);
  t[2]->Abort(transport::DeadlineIn(milliseconds(100)));  // a dead rank
  std::vector<absl::Status> st(2);
  const auto start = transport::Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      st[r] = member::ProbeLinks(*t[r], 1, transport::DeadlineIn(milliseconds(10000))).status();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LT(Since(start), 5.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(st[r].ok()) << r;
    EXPECT_NE(st[r].message().find("link probe"), std::string::npos) << st[r];
  }
}

TEST(LinkProbeTest, AbsentPeerEndsAtTheDeadline) {
  auto t = transport::CreateLoopbackTransports(2);  // rank 1 never probes
  const auto start = transport::Clock::now();
  absl::Status s = member::ProbeLinks(*t[0], 1, transport::DeadlineIn(milliseconds(300))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(Since(start), 3.0);
}

TEST(LinkProbeTest, WrongSizedMessageIsRefused) {
  auto t = transport::CreateLoopbackTransports(2);
  // Rank 1 sends a short message under the probe's first tag.
  ASSERT_TRUE(
      t[1]->PostSend(0, collectives::MessageTag(member::kProbePhase, 0, 0), transport::Bytes(3, 0))
          .ok());
  absl::Status s = member::ProbeLinks(*t[0], 1, transport::DeadlineIn(milliseconds(2000))).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Agents over the fake control plane and loopback communicators.
constexpr size_t kN = 3001;

struct Box {
  std::unique_ptr<testing::FakeControlPlane> control;
  std::unique_ptr<testing::LoopbackProvider> transports;
  std::unique_ptr<pipeline::Agent> agent;
  std::unique_ptr<pipeline::WholeStep> step;  // the agent's whole steps, made with it
};

Box MakeAgent(testing::FakeCoordinator& c, testing::LoopbackPool& pool, int i) {
  Box b;
  b.control = std::make_unique<testing::FakeControlPlane>(&c, 256);
  b.transports = std::make_unique<testing::LoopbackProvider>(&pool, absl::StrCat("addr", i));
  pipeline::AgentOptions o = testing::TestAgentOptions(absl::StrCat("a", i));
  o.elements = kN;
  b.agent = std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), nullptr);
  b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
  return b;
}

testing::FakeJobConfig Job(int teams, bool measure) {
  testing::FakeJobConfig c;
  c.world_size = 4;
  c.lease = milliseconds(400);
  c.base.algorithm = "spardl-bsag";
  c.base.density = 0.05;
  c.base.teams = teams;
  c.base.tau = 8;
  c.base.step_deadline = milliseconds(5000);
  c.base.measure_links = measure;
  return c;
}

struct Record {
  int teams = 0;
  RankCall call;
};

// Runs steps 0..last on every agent; before(step) runs before each step.
std::map<uint64_t, std::map<int, Record>> RunAll(std::vector<Box>& boxes, uint64_t last,
                                                 const std::function<void(uint64_t)>& before) {
  absl::Mutex mu;
  std::map<uint64_t, std::map<int, Record>> steps;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < boxes.size(); ++i) {
    threads.emplace_back([&, i] {
      pipeline::WholeStep& whole = *boxes[i].step;
      pipeline::Agent& a = whole.agent();
      ASSERT_TRUE(a.Start().ok());
      for (uint64_t step = 0; step <= last; ++step) {
        if (before) before(step);
        RankCall call;
        call.grad =
            MakeGradient(11, static_cast<int>(i), static_cast<int>(step), kN, Values::kGrid);
        call.residual_in = whole.residuals()[0];
        std::span<const float> g(call.grad);
        pipeline::StepOutcome out;
        absl::Status s = whole.Run({&g, 1}, &out);
        ASSERT_TRUE(s.ok()) << s;
        ASSERT_EQ(out.step, step);
        call.residual_out = whole.residuals()[0];
        call.result.assign(kN, 0.0f);
        out.results[0].ToDense(call.result);
        call.stats = out.stats[0];
        absl::MutexLock lock(&mu);
        steps[step][out.rank] = Record{a.plan()->teams, std::move(call)};
      }
    });
  }
  for (auto& t : threads) t.join();
  return steps;
}

void WaitReports(testing::FakeCoordinator& c, uint64_t n) {
  for (int i = 0; i < 400 && c.reports_received() < n; ++i)
    std::this_thread::sleep_for(milliseconds(5));
}

TEST(LinkProbeAgentTest, AgentsProbeAtTheEpochStartAndReportTheEstimate) {
  testing::FakeCoordinator c(Job(2, true));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(c, pool, i));
  RunAll(boxes, 5, nullptr);
  WaitReports(c, 24);
  std::vector<member::StepReport> reports = c.reports();
  ASSERT_EQ(reports.size(), 24u);
  for (const member::StepReport& r : reports) {
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_TRUE(r.link.has_value()) << "step " << r.step << " rank " << r.rank;
    EXPECT_GT(r.link->alpha_s, 0);
    EXPECT_TRUE(std::isfinite(r.link->alpha_s));
    EXPECT_GE(r.link->beta_s_per_byte, 0);
    EXPECT_TRUE(std::isfinite(r.link->beta_s_per_byte));
    EXPECT_EQ(r.link->samples, 5u);
  }
}

TEST(LinkProbeAgentTest, NoProbeUnlessThePlanAsks) {
  testing::FakeCoordinator c(Job(2, false));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(c, pool, i));
  RunAll(boxes, 2, nullptr);
  WaitReports(c, 12);
  for (const member::StepReport& r : c.reports()) EXPECT_FALSE(r.link.has_value());
}

// The coordinator's automatic team count switches T inside an epoch at a
// barrier: every rank switches at the same step (same algorithm, so the
// objects are kept), k' of the old layout is dropped, and every step stays
// consistent and conserving.
TEST(LinkProbeAgentTest, TeamCountChangeAtABarrierKeepsInvariants) {
  testing::FakeCoordinator c(Job(2, true));
  testing::LoopbackPool pool;
  std::vector<Box> boxes;
  for (int i = 0; i < 4; ++i) boxes.push_back(MakeAgent(c, pool, i));
  constexpr uint64_t kKPrimeAt = 5, kTeamsAt = 11, kEffective = 16, kLast = 27;
  constexpr size_t kKPrime = 7;
  std::barrier sync(5);
  std::thread publisher([&] {
    sync.arrive_and_wait();
    c.UpdatePlan(
        [](member::Plan& p) {
          p.kprime = {{kKPrime, kKPrime}};
        },
        0);  // the T=2 layout's k'
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    c.UpdatePlan(
        [](member::Plan& p) {
          p.teams = 4;
          p.kprime.clear();
        },
        kEffective);
    sync.arrive_and_wait();
  });
  auto steps = RunAll(boxes, kLast, [&](uint64_t step) {
    if (step == kKPrimeAt || step == kTeamsAt) {
      sync.arrive_and_wait();
      sync.arrive_and_wait();
    }
  });
  publisher.join();
  ASSERT_EQ(steps.size(), kLast + 1);
  for (auto& [step, ranks] : steps) {
    ASSERT_EQ(ranks.size(), 4u) << step;
    std::vector<RankCall> calls;
    for (auto& [rank, r] : ranks) {
      EXPECT_EQ(r.teams, step < kEffective ? 2 : 4) << "step " << step << " rank " << rank;
      if (step >= kKPrimeAt && step < kTeamsAt) {
        EXPECT_EQ(r.call.stats.Detail("kprime_used"), kKPrime) << "step " << step;
      }
      if (step >= kEffective) {
        EXPECT_NE(r.call.stats.Detail("kprime_used"), kKPrime)
            << "old layout's k' at step " << step;
      }
      calls.push_back(r.call);
    }
    EXPECT_TRUE(Consistent(calls)) << "step " << step;
    EXPECT_LT(ConservationError(calls, /*relative=*/true), 1e-5) << "step " << step;
  }
}

}  // namespace
}  // namespace gradex
