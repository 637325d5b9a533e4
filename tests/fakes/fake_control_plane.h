// An in-memory coordinator and its client, for multi-agent tests in one
// process: token check, rendezvous to a world size, leases with eviction, a
// new epoch on every membership change, plan versions pushed to every
// subscriber, reports collected. Test hooks change the plan, pause report
// delivery and simulate a crash.
//
// Epoch rules (those of proto/gradex/v1/coordinator.proto):
// - the first epoch opens when `world_size` agents have joined;
// - a new agent is admitted by a new epoch whose effective_step is a plan
//   barrier at least one period past the newest reported step;
// - a lost member (lease expiry, leave) or a re-registration (same agent id)
//   opens a new epoch at once (effective_step = the newest reported step);
// - each plan member's node is the host it joined with (no node-wide
//   eviction here: that is the real coordinator's).
#ifndef GRADEX_TESTS_FAKES_FAKE_CONTROL_PLANE_H_
#define GRADEX_TESTS_FAKES_FAKE_CONTROL_PLANE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "member/control_plane.h"
#include "member/plan_store.h"
#include "member/report_queue.h"

namespace gradex::testing {

struct FakeJobConfig {
  std::string job = "job";
  std::string token = "token";
  int world_size = 4;
  std::chrono::milliseconds lease{1000};
  member::Plan base;  // algorithm, density, teams, tau, k', deadline of every epoch
};

class FakeCoordinator {
 public:
  explicit FakeCoordinator(FakeJobConfig config);
  ~FakeCoordinator();

  absl::StatusOr<member::JoinReply> Join(const member::JoinRequest& request,
                                         member::PlanStore* subscriber);
  absl::Status Heartbeat(const std::string& agent_id);
  absl::Status Leave(const std::string& agent_id);
  void Unsubscribe(const std::string& agent_id);
  void Report(const member::StepReport& report);

  // Test hooks. Publishes a new version of the current plan with `change`
  // applied, effective at `effective_step`.
  void UpdatePlan(const std::function<void(member::Plan&)>& change, uint64_t effective_step);
  std::shared_ptr<const member::Plan> plan() const;
  uint64_t reports_received() const;
  std::vector<member::StepReport> reports() const;
  int evictions() const;

 private:
  struct Member {
    std::string address;
    std::string node;  // its JoinRequest.host: the plan's PlanMember.node
    transport::Clock::time_point last_seen;
    uint64_t order = 0;  // first join; ranks follow it
    member::PlanStore* subscriber = nullptr;
  };
  void Reap();
  void CheckLeasesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens a new epoch if the rules above allow it.
  void MaybeOpenEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked(member::Plan plan) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeJobConfig config_;
  mutable absl::Mutex mu_;
  std::map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const member::Plan> plan_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  bool membership_changed_ ABSL_GUARDED_BY(mu_) = false;
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t max_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<member::StepReport> reports_ ABSL_GUARDED_BY(mu_);
  int evictions_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reaper_;
};

// One agent's view of a FakeCoordinator: heartbeats and report delivery on
// background threads, plans pushed into its own store.
class FakeControlPlane final : public member::ControlPlane {
 public:
  explicit FakeControlPlane(FakeCoordinator* coordinator, size_t report_capacity = 64);
  ~FakeControlPlane() override;

  absl::StatusOr<member::JoinReply> Join(const member::JoinRequest& request,
                                         transport::Deadline deadline) override;
  absl::Status Heartbeat(transport::Deadline deadline) override;
  absl::Status Leave(transport::Deadline deadline) override;
  std::shared_ptr<const member::Plan> LatestPlan() const override { return store_.Latest(); }
  std::shared_ptr<const member::Plan> PlanVersion(uint64_t v) const override {
    return store_.Version(v);
  }
  bool ReportStep(member::StepReport report) override { return reports_.Push(std::move(report)); }
  uint64_t report_drops() const override { return reports_.drops(); }
  // Kept for tests (the fake coordinator does no hang diagnosis).
  void SetWaitSource(std::shared_ptr<const member::WaitSource> source) override {
    std::atomic_store(&waits_, std::move(source));
  }
  std::shared_ptr<const member::WaitSource> wait_source() const {
    return std::atomic_load(&waits_);
  }

  // Test hooks: stop delivering reports (the queue fills up), and die like
  // kill -9 (no more heartbeats or reports, no leave).
  void PauseReports(bool paused) { paused_.store(paused); }
  void Crash();

 private:
  void Stop();

  FakeCoordinator* const coordinator_;
  member::PlanStore store_;
  member::ReportQueue reports_;
  std::atomic<bool> paused_{false};
  std::atomic<bool> stop_{false};
  std::string agent_id_;
  std::shared_ptr<const member::WaitSource> waits_;  // std::atomic_load/store only
  std::chrono::milliseconds lease_{1000};
  std::thread heartbeats_, sender_;
};

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_FAKES_FAKE_CONTROL_PLANE_H_
