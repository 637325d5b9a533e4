// Test helper: agents' control plane backed by the real coordinator logic
// (services/coordinator/coordinator.h) in the same process, with every
// message converted as the gRPC path does it (grpc_messages.h) and reports
// checked as the service checks them (validate.h), but no sockets. For
// tests that need the coordinator's controllers to react to real agents'
// reports (the fake control plane has none).
#ifndef GRADEX_TESTS_AGENT_COORDINATOR_BRIDGE_H_
#define GRADEX_TESTS_AGENT_COORDINATOR_BRIDGE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "member/control_plane.h"
#include "member/grpc_messages.h"
#include "member/plan_store.h"
#include "member/report_queue.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/validate.h"
#include "tests/agent/loopback_provider.h"

namespace gradex::testing {

// The coordinator and its ticker (every 5 ms, as the server's).
class CoordinatorHub {
 public:
  explicit CoordinatorHub(coordinator::JobSettings s) : c_(std::move(s), nullptr) {
    ticker_ = std::thread([this] {
      while (!stop_.load()) {
        c_.Tick(absl::Now());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  ~CoordinatorHub() {
    stop_.store(true);
    ticker_.join();
  }
  coordinator::Coordinator& coordinator() { return c_; }

 private:
  coordinator::Coordinator c_;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

class BridgeControlPlane final : public member::ControlPlane {
 public:
  explicit BridgeControlPlane(CoordinatorHub* hub) : hub_(hub), reports_(256) {}
  ~BridgeControlPlane() override { Stop(); }

  absl::StatusOr<member::JoinReply> Join(const member::JoinRequest& request,
                                         transport::Deadline) override {
    gradex::v1::JoinRequest req = member::JoinToProto(request, request.next_step);
    req.set_job_id(hub_->coordinator().settings().job_id);
    // Not ValidateJoin: loopback agents have no UCX listener address or version.
    absl::StatusOr<gradex::v1::JoinResponse> r = hub_->coordinator().Join(req, absl::Now());
    if (!r.ok()) return r.status();
    member_ = r->member_id();
    if (!worker_.joinable()) worker_ = std::thread([this] { Run(); });
    member::JoinReply reply;
    reply.member_id = absl::StrCat(member_);
    reply.lease = std::chrono::milliseconds(r->lease_duration_ms());
    return reply;
  }
  absl::Status Heartbeat(transport::Deadline) override {
    gradex::v1::HeartbeatRequest h;
    h.set_member_id(member_);
    return hub_->coordinator().Heartbeat(h, absl::Now()).status();
  }
  absl::Status Leave(transport::Deadline) override {
    Stop();
    gradex::v1::LeaveRequest l;
    l.set_member_id(member_);
    return hub_->coordinator().Leave(l, absl::Now());
  }
  std::shared_ptr<const member::Plan> LatestPlan() const override { return store_.Latest(); }
  std::shared_ptr<const member::Plan> PlanVersion(uint64_t v) const override {
    return store_.Version(v);
  }
  bool ReportStep(member::StepReport report) override { return reports_.Push(std::move(report)); }
  uint64_t report_drops() const override { return reports_.drops(); }
  uint64_t reports_refused() const { return refused_.load(); }
  // kill -9: heartbeats and reports stop, no Leave.
  void Crash() { Stop(); }

 private:
  // Plans (as WatchPlan streams them), heartbeats and reports.
  void Run() {
    uint64_t seen = 0;
    auto last_beat = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      if (auto p = hub_->coordinator().plan(); p != nullptr && p->version() > seen) {
        seen = p->version();
        absl::StatusOr<member::Plan> plan = member::ToPlan(*p, 0);
        if (plan.ok()) store_.Publish(*std::move(plan)).IgnoreError();
      }
      if (std::chrono::steady_clock::now() - last_beat > std::chrono::milliseconds(200)) {
        Heartbeat(transport::Deadline{}).IgnoreError();
        last_beat = std::chrono::steady_clock::now();
      }
      while (std::optional<member::StepReport> r =
                 reports_.Pop(transport::DeadlineIn(std::chrono::milliseconds(2)))) {
        gradex::v1::StepReport m = member::ToProto(*r, member_, "");
        bool accepted = false;
        if (!coordinator::ValidateReport(m).ok() ||
            !hub_->coordinator().Report(m, absl::Now(), &accepted).ok()) {
          refused_.fetch_add(1);
        }
        if (stop_.load()) break;
      }
    }
  }
  void Stop() {
    stop_.store(true);
    reports_.Close();
    if (worker_.joinable()) worker_.join();
  }

  CoordinatorHub* const hub_;
  member::PlanStore store_;
  member::ReportQueue reports_;
  uint64_t member_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::thread worker_;
};

// One agent of a bridged job: its control plane on `hub`, its transports
// from `pool`, named a<i> with the timeouts the e2e tests share.
struct BridgedAgent {
  std::unique_ptr<BridgeControlPlane> control;
  std::unique_ptr<LoopbackProvider> transports;
  std::unique_ptr<pipeline::Agent> agent;
  std::unique_ptr<pipeline::WholeStep> step;  // the agent's whole steps, made with it
};

inline BridgedAgent MakeBridgedAgent(CoordinatorHub& hub, LoopbackPool& pool, int i,
                                     const member::BucketRules& rules = {}) {
  BridgedAgent b;
  b.control = std::make_unique<BridgeControlPlane>(&hub);
  b.transports = std::make_unique<LoopbackProvider>(&pool, absl::StrCat("addr-", i));
  pipeline::AgentOptions o = TestAgentOptions(absl::StrCat("a", i));
  o.rules = rules;
  b.agent = std::make_unique<pipeline::Agent>(o, b.control.get(), b.transports.get(), nullptr);
  b.step = std::make_unique<pipeline::WholeStep>(b.agent.get());
  return b;
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_AGENT_COORDINATOR_BRIDGE_H_
