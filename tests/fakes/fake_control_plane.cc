#include "tests/fakes/fake_control_plane.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::testing {
namespace {

// The first multiple of tau at least one period past `step`.
uint64_t BarrierAfter(uint64_t step, int tau) {
  const uint64_t t = static_cast<uint64_t>(std::max(tau, 1));
  return (step / t + 2) * t;
}

}  // namespace

FakeCoordinator::FakeCoordinator(FakeJobConfig config) : config_(std::move(config)) {
  reaper_ = std::thread([this] { Reap(); });
}

FakeCoordinator::~FakeCoordinator() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  reaper_.join();
}

void FakeCoordinator::Reap() {
  const absl::Duration period = absl::FromChrono(config_.lease) / 8;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), period);
    CheckLeasesLocked();
  }
}

void FakeCoordinator::CheckLeasesLocked() {
  const transport::Clock::time_point now = transport::Clock::now();
  for (auto it = members_.begin(); it != members_.end();) {
    if (now - it->second.last_seen > config_.lease) {
      it = members_.erase(it);
      ++evictions_;
      urgent_ = true;
    } else {
      ++it;
    }
  }
  MaybeOpenEpochLocked();
}

absl::StatusOr<member::JoinReply> FakeCoordinator::Join(const member::JoinRequest& request,
                                                        member::PlanStore* subscriber) {
  if (request.job != config_.job) {
    return absl::NotFoundError(absl::StrCat("unknown job '", request.job, "'"));
  }
  if (request.token != config_.token) return absl::UnauthenticatedError("bad token");
  if (request.agent_id.empty() || request.ucx_address.empty()) {
    return absl::InvalidArgumentError("join needs an agent id and a UCX address");
  }
  absl::MutexLock lock(&mu_);
  auto it = members_.find(request.agent_id);
  if (it == members_.end()) {
    Member m;
    m.address = request.ucx_address;
    m.node = request.host;
    m.order = next_order_++;
    it = members_.emplace(request.agent_id, m).first;
    membership_changed_ = true;
  } else {
    // Re-registration replaces the membership: the member's epoch is broken
    // (it failed a step, or it lost us), so a new epoch opens at once.
    it->second.address = request.ucx_address;
    it->second.node = request.host;
    urgent_ = true;
  }
  it->second.last_seen = transport::Clock::now();
  it->second.subscriber = subscriber;
  MaybeOpenEpochLocked();
  if (plan_ != nullptr) subscriber->Publish(*plan_).IgnoreError();  // already held is fine
  return member::JoinReply{.member_id = request.agent_id, .lease = config_.lease};
}

absl::Status FakeCoordinator::Heartbeat(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(agent_id);
  if (it == members_.end()) return absl::NotFoundError(agent_id + " is not a member");
  it->second.last_seen = transport::Clock::now();
  return absl::OkStatus();
}

absl::Status FakeCoordinator::Leave(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  if (members_.erase(agent_id) == 0) return absl::NotFoundError(agent_id + " is not a member");
  urgent_ = true;
  MaybeOpenEpochLocked();
  return absl::OkStatus();
}

void FakeCoordinator::Unsubscribe(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(agent_id);
  if (it != members_.end()) it->second.subscriber = nullptr;
}

void FakeCoordinator::Report(const member::StepReport& report) {
  absl::MutexLock lock(&mu_);
  max_step_ = std::max(max_step_, report.step);
  if (reports_.size() < 1000000) reports_.push_back(report);
}

void FakeCoordinator::MaybeOpenEpochLocked() {
  if (plan_ == nullptr) {
    if (static_cast<int>(members_.size()) < config_.world_size) return;
  } else if (!membership_changed_ && !urgent_) {
    return;
  }
  if (members_.empty()) return;
  member::Plan p = plan_ == nullptr ? config_.base : *plan_;
  p.version = plan_ == nullptr ? 1 : plan_->version + 1;
  p.epoch = plan_ == nullptr ? 1 : plan_->epoch + 1;
  // A lost member breaks the epoch: the next one applies at once (its members
  // are waiting); a newcomer is admitted at a barrier all ranks can reach.
  p.effective_step = plan_ == nullptr || urgent_ ? max_step_ : BarrierAfter(max_step_, p.tau);
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [id, m] : members_) order.emplace_back(m.order, id);
  std::sort(order.begin(), order.end());
  // Teams must divide P: the largest count up to the configured one that does.
  p.teams = std::max(config_.base.teams, 1);
  while (static_cast<int>(members_.size()) % p.teams != 0) --p.teams;
  p.kprime.clear();  // k' was for the old layout; the agents' controllers take over
  p.members.clear();
  for (const auto& [o, id] : order) {
    const Member& m = members_[id];
    p.members.push_back({static_cast<int>(p.members.size()), id, m.address, false, m.node});
  }
  urgent_ = false;
  membership_changed_ = false;
  PublishLocked(std::move(p));
}

void FakeCoordinator::PublishLocked(member::Plan plan) {
  plan_ = std::make_shared<const member::Plan>(std::move(plan));
  for (auto& [id, m] : members_) {
    if (m.subscriber != nullptr) m.subscriber->Publish(*plan_).IgnoreError();
  }
}

void FakeCoordinator::UpdatePlan(const std::function<void(member::Plan&)>& change,
                                 uint64_t effective_step) {
  absl::MutexLock lock(&mu_);
  if (plan_ == nullptr) return;
  member::Plan p = *plan_;
  change(p);
  p.version = plan_->version + 1;
  p.effective_step = effective_step;
  PublishLocked(std::move(p));
}

std::shared_ptr<const member::Plan> FakeCoordinator::plan() const {
  absl::MutexLock lock(&mu_);
  return plan_;
}

uint64_t FakeCoordinator::reports_received() const {
  absl::MutexLock lock(&mu_);
  return reports_.size();
}

std::vector<member::StepReport> FakeCoordinator::reports() const {
  absl::MutexLock lock(&mu_);
  return reports_;
}

int FakeCoordinator::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

FakeControlPlane::FakeControlPlane(FakeCoordinator* coordinator, size_t report_capacity)
    : coordinator_(coordinator), reports_(report_capacity) {}

FakeControlPlane::~FakeControlPlane() {
  Stop();
  if (!agent_id_.empty()) coordinator_->Unsubscribe(agent_id_);
}

absl::StatusOr<member::JoinReply> FakeControlPlane::Join(const member::JoinRequest& request,
                                                         transport::Deadline deadline) {
  absl::StatusOr<member::JoinReply> reply = coordinator_->Join(request, &store_);
  if (!reply.ok()) return reply;
  lease_ = reply->lease;
  if (agent_id_.empty()) {
    agent_id_ = request.agent_id;
    heartbeats_ = std::thread([this] {
      while (!stop_.load()) {
        for (int i = 0; i < 4 && !stop_.load(); ++i) std::this_thread::sleep_for(lease_ / 16);
        if (!stop_.load()) coordinator_->Heartbeat(agent_id_).IgnoreError();
      }
    });
    sender_ = std::thread([this] {
      while (!stop_.load()) {
        if (paused_.load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        std::optional<member::StepReport> r =
            reports_.Pop(transport::DeadlineIn(std::chrono::milliseconds(20)));
        if (r && !stop_.load()) coordinator_->Report(*r);
      }
    });
  }
  return reply;
}

absl::Status FakeControlPlane::Heartbeat(transport::Deadline deadline) {
  return coordinator_->Heartbeat(agent_id_);
}

absl::Status FakeControlPlane::Leave(transport::Deadline deadline) {
  Stop();
  return coordinator_->Leave(agent_id_);
}

void FakeControlPlane::Crash() {
  Stop();
  coordinator_->Unsubscribe(agent_id_);
}

void FakeControlPlane::Stop() {
  stop_.store(true);
  reports_.Close();
  if (heartbeats_.joinable()) heartbeats_.join();
  if (sender_.joinable()) sender_.join();
}

}  // namespace gradex::testing
