// The agent feeds its control plane's heartbeat a wait source: while one of
// three agents stays out of step 3 (a trainer stuck in compute), the others'
// sources show a wait in epoch 1, step 3 whose chain ends at rank 2, the late
// rank's own source shows none, and once it arrives the waits are gone and
// every step completes.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "tests/agent/loopback_provider.h"
#include "tests/fakes/fake_control_plane.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

constexpr size_t kN = 2001;
constexpr uint64_t kLateStep = 3, kLast = 5;

TEST(AgentWaits, PeersOfALateRankShowTheirWaitInTheHeartbeatSource) {
  testing::FakeJobConfig config;
  config.world_size = 3;
  config.lease = milliseconds(400);
  config.base.algorithm = "spardl-bsag";
  config.base.density = 0.05;
  config.base.tau = 8;
  config.base.step_deadline = milliseconds(10000);
  testing::FakeCoordinator coordinator(config);
  testing::LoopbackPool pool;
  struct Box {
    std::unique_ptr<testing::FakeControlPlane> control;
    std::unique_ptr<testing::LoopbackProvider> transports;
    std::unique_ptr<pipeline::Agent> agent;
    std::unique_ptr<pipeline::WholeStep> step;  // the agent's whole steps, made with it
  };
  std::vector<Box> boxes(3);
  for (int i = 0; i < 3; ++i) {
    Box& b = boxes[i];
    b.control = std::make_unique<testing::FakeControlPlane>(&coordinator);
    b.transports = std::make_unique<testing::LoopbackProvider>(&pool, absl::StrCat("addr", i));
    pipeline::AgentOptions o = testing::TestAgentOptions(absl::StrCat("a", i));
    o.local_rank = i;
    o.elements = kN;
    b.agent = std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), nullptr);
    b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
    ASSERT_NE(b.control->wait_source(), nullptr) << "the agent gave its control plane no source";
    absl::Status started = b.agent->Start();
    ASSERT_TRUE(started.ok()) << started;  // in order: the fake ranks by first join
  }
  std::atomic<bool> late_may_go{false};
  std::atomic<int> late_rank{-1};
  std::vector<absl::Status> status(3, absl::OkStatus());
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      pipeline::WholeStep& whole = *boxes[i].step;
      pipeline::Agent& a = whole.agent();
      std::vector<float> g(kN);
      for (int attempt = 0; status[i].ok() && attempt < 20; ++attempt) {
        if (a.connected() && a.next_step() > kLast) return;
        if (a.connected() && a.next_step() == kLateStep && i == 2) {
          late_rank.store(a.rank());
          const transport::Clock::time_point until = transport::Clock::now() + milliseconds(20000);
          while (!late_may_go.load() && transport::Clock::now() < until) {
            std::this_thread::sleep_for(milliseconds(5));
          }
        }
        for (size_t j = 0; j < kN; ++j) g[j] = static_cast<float>((j * 7 + i + attempt) % 13) - 6;
        std::span<const float> s(g);
        pipeline::StepOutcome out;
        status[i] = whole.Run({&s, 1}, &out);
      }
    });
  }
  // Wait until agent 2 holds back and both others have waited 300 ms.
  std::optional<member::WaitInfo> w0, w1;
  const transport::Clock::time_point until = transport::Clock::now() + milliseconds(15000);
  while (transport::Clock::now() < until && !(w0 && w1)) {
    std::this_thread::sleep_for(milliseconds(10));
    if (late_rank.load() < 0) continue;
    w0 = boxes[0].control->wait_source()->OldestWait(milliseconds(300));
    w1 = boxes[1].control->wait_source()->OldestWait(milliseconds(300));
  }
  const int late = late_rank.load();
  ASSERT_TRUE(w0 && w1) << "the waiting agents' sources show no wait";
  std::optional<member::WaitInfo> own =
      boxes[2].control->wait_source()->OldestWait(milliseconds(0));
  late_may_go.store(true);
  for (auto& t : threads) t.join();

  EXPECT_EQ(late, 2);  // ranks follow join order (local rank) in the fake
  EXPECT_FALSE(own.has_value()) << "the late agent is not in the exchange";
  for (const std::optional<member::WaitInfo>& w : {w0, w1}) {
    EXPECT_EQ(w->epoch, 1u);
    EXPECT_EQ(w->step, kLateStep);
    EXPECT_GE(w->waited.count(), 300);
  }
  // Each waits on the late rank or on the other waiter, and not both on each
  // other: the chain ends at rank 2.
  EXPECT_TRUE(w0->peer == 2 || w0->peer == 1) << w0->peer;
  EXPECT_TRUE(w1->peer == 2 || w1->peer == 0) << w1->peer;
  EXPECT_TRUE(w0->peer == 2 || w1->peer == 2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(status[i].ok()) << "agent " << i << ": " << status[i];
    EXPECT_GT(boxes[i].agent->next_step(), kLast);
    EXPECT_EQ(boxes[i].control->wait_source()->running_epoch(), 1u);
    EXPECT_FALSE(boxes[i].control->wait_source()->OldestWait(milliseconds(0)).has_value());
  }
}

}  // namespace
}  // namespace gradex
