// Algorithm parameters travel as data: a parameter that
// exists only in this file's catalog entry goes from the job config through
// the coordinator's plan, the agent's plan conversion and the agents'
// barrier agreement to the algorithm's call, with no other code naming it;
// a bad value is refused, naming the parameter, wherever it enters.
#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "catalog/catalog.h"
#include "member/grpc_messages.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/job_config.h"
#include "tests/agent/loopback_provider.h"
#include "tests/collectives/test_dense_gather.h"
#include "tests/coordinator/join_all.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

constexpr char kName[] = "test-param-probe";
constexpr char kParam[] = "probe_scale";
constexpr size_t kN = 64;

GRADEX_CATALOG_ENTRY({.id = 60002,
                      .name = kName,
                      .description = "test only: dense all-to-all that records its parameter",
                      .traits = {.dense = true},
                      .params = {{.name = kParam,
                                  .type = catalog::ParamType::kDouble,
                                  .default_value = 1,
                                  .min = 0.5,
                                  .max = 4,
                                  .description = "test only: recorded by every call"}}});

// What each call saw, by (training step, rank).
absl::Mutex seen_mu;
std::map<std::pair<uint64_t, int>, double>& Seen() {
  static auto* seen = new std::map<std::pair<uint64_t, int>, double>;
  return *seen;
}

// The test gather schedule, recording the parameter every call sees.
class ParamProbe final : public gradex::testing::TestDenseGather {
 public:
  ParamProbe() : TestDenseGather(kName) {}

 protected:
  absl::Status CheckOptions(const collectives::CallContext& ctx,
                            const collectives::AllreduceOptions& options) const override {
    absl::MutexLock lock(&seen_mu);
    Seen()[{ctx.training_step, ctx.transport->rank()}] = Param(options, kParam);
    return absl::OkStatus();
  }
};

GRADEX_REGISTER_ALGORITHM(kName, [] { return std::make_unique<ParamProbe>(); });

std::string Config(const std::string& params) {
  return absl::StrCat(R"({"job_id":"job","world_size":3,"algorithm":")", kName,
                      R"(","density":0.05,"barrier_period":4,"params":)", params, "}");
}

// Job config -> coordinator plan -> agent Plan, as the gRPC control plane
// converts it.
absl::StatusOr<member::Plan> PlanFromConfig(const std::string& json) {
  absl::StatusOr<coordinator::JobSettings> s = coordinator::ParseJobConfig(json);
  if (!s.ok()) return s.status();
  s->lease = absl::Seconds(100);
  const absl::Time t0 = absl::FromUnixSeconds(5000);
  coordinator::Coordinator c(*s, nullptr);
  if (coordinator::JoinAll(c, s->world_size, t0).size() != 3u) {
    return absl::InternalError("join failed");
  }
  c.Tick(t0);
  if (c.plan() == nullptr) return absl::InternalError("no plan");
  return member::ToPlan(*c.plan(), 0);
}

TEST(ParamsTest, BadValuesAreRefusedNamingTheParameter) {
  for (const char* bad : {R"({"probe_scale": 9})", R"({"probe_scale": 0.1})"}) {
    auto s = coordinator::ParseJobConfig(Config(bad));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find(kParam), std::string::npos) << s.status();
  }
  // A name the entry lacks: refused, naming it and listing the entry's own.
  auto typo = coordinator::ParseJobConfig(Config(R"({"probe_scal": 2})"));
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("'probe_scal'"), std::string::npos) << typo.status();
  EXPECT_NE(typo.status().message().find(kParam), std::string::npos) << typo.status();
  // Another algorithm's parameter is not this one's.
  auto other = coordinator::ParseJobConfig(Config(R"({"oktopk_tau": 8})"));
  EXPECT_NE(other.status().message().find("oktopk_tau"), std::string::npos) << other.status();
  // A plan carrying a bad value (a coordinator of another version, or a
  // forged one) is refused by the agent, naming the parameter.
  gradex::v1::Plan m;
  m.set_epoch(1);
  m.set_algorithm(kName);
  m.set_density(0.05);
  m.set_teams(1);
  m.set_barrier_period(4);
  m.set_step_deadline_ms(1000);
  (*m.mutable_params())[kParam] = 2;
  EXPECT_TRUE(member::ToPlan(m, 0).ok());
  (*m.mutable_params())[kParam] = 5;
  auto plan = member::ToPlan(m, 0);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find(kParam), std::string::npos) << plan.status();
}

TEST(ParamsTest, OldTopLevelKeysAreAliasesOfTheirParameters) {
  const std::string base = R"({"job_id":"j","world_size":4,"algorithm":"oktopk","density":0.01)";
  auto s = coordinator::ParseJobConfig(base + R"(,"oktopk_tau":8,"quantize_bits":4})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->params.at("oktopk_tau"), 8);
  EXPECT_EQ(s->params.count("quantize_bits"), 0u) << "oktopk has no quantize_bits";
  EXPECT_TRUE(
      coordinator::ParseJobConfig(base + R"(,"oktopk_tau":8,"params":{"oktopk_tau":8}})").ok());
  auto clash = coordinator::ParseJobConfig(base + R"(,"oktopk_tau":8,"params":{"oktopk_tau":9}})");
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParamsTest, ACatalogOnlyParameterReachesEveryCallAndChangesAtABarrier) {
  absl::StatusOr<member::Plan> plan = PlanFromConfig(Config(R"({"probe_scale": 2.5})"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->params.count(kParam), 1u);
  EXPECT_EQ(plan->params.at(kParam), 2.5);

  testing::FakeJobConfig job;
  job.world_size = 3;
  job.lease = milliseconds(2000);
  job.base = *plan;
  job.base.step_deadline = milliseconds(5000);
  testing::FakeCoordinator coordinator(job);
  testing::LoopbackPool pool;
  struct Box {
    std::unique_ptr<testing::FakeControlPlane> control;
    std::unique_ptr<testing::LoopbackProvider> transports;
    std::unique_ptr<pipeline::AgentMetrics> metrics;
    std::unique_ptr<pipeline::Agent> agent;
    std::unique_ptr<pipeline::WholeStep> step;  // the agent's whole steps, made with it
  };
  std::vector<Box> boxes(3);
  for (int i = 0; i < 3; ++i) {
    Box& b = boxes[i];
    b.control = std::make_unique<testing::FakeControlPlane>(&coordinator, 64);
    b.transports = std::make_unique<testing::LoopbackProvider>(&pool, absl::StrCat("addr-", i));
    b.metrics = std::make_unique<pipeline::AgentMetrics>();
    pipeline::AgentOptions o = testing::TestAgentOptions(absl::StrCat("a", i));
    o.elements = kN;
    b.agent =
        std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), b.metrics.get());
    b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
  }
  constexpr uint64_t kChange = 8, kLast = 11;  // a barrier (tau = 4) and the last step
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      pipeline::WholeStep& whole = *boxes[i].step;
      pipeline::Agent& a = whole.agent();
      ASSERT_TRUE(a.Start().ok());
      std::vector<float> grad(kN, 1.0f);
      std::span<const float> g(grad);
      for (int attempt = 0; attempt < 100; ++attempt) {
        if (a.connected() && a.next_step() > kLast) return;
        if (i == 0 && a.connected() && a.next_step() == 2) {
          // Published early, applied at its barrier on every rank.
          coordinator.UpdatePlan([](member::Plan& p) { p.params[kParam] = 3.5; }, kChange);
        }
        pipeline::StepOutcome out;
        ASSERT_TRUE(whole.Run({&g, 1}, &out).ok());
      }
      FAIL() << "agent " << i << " did not finish";
    });
  }
  for (auto& t : threads) t.join();
  absl::MutexLock lock(&seen_mu);
  for (uint64_t step = 0; step <= kLast; ++step) {
    for (int rank = 0; rank < 3; ++rank) {
      auto it = Seen().find({step, rank});
      ASSERT_NE(it, Seen().end()) << "step " << step << " rank " << rank;
      EXPECT_EQ(it->second, step < kChange ? 2.5 : 3.5) << "step " << step << " rank " << rank;
    }
  }
}

}  // namespace
}  // namespace gradex
