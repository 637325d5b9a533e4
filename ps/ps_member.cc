#include "ps/ps_member.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"

namespace gradex::ps {

// The heartbeats' running epoch; a parameter-server member never waits
// inside a collective, so it reports no wait.
class PsMember::Running final : public member::WaitSource {
 public:
  std::optional<member::WaitInfo> OldestWait(std::chrono::milliseconds) const override {
    return std::nullopt;
  }
  uint32_t running_epoch() const override { return epoch.load(); }
  std::atomic<uint32_t> epoch{0};
};

uint64_t PsJobId(const std::string& job) {
  return catalog::Fnv1a(job, catalog::kFnv1aTruncatedBasis);
}

PsMember::PsMember(PsMemberOptions options, member::ControlPlane* control,
                   member::TransportProvider* transports)
    : options_(std::move(options)),
      control_(control),
      transports_(transports),
      running_(std::make_shared<Running>()) {
  control_->SetWaitSource(running_);
}

absl::Status PsMember::Join(transport::Deadline deadline) {
  member::JoinRequest req = member::MemberJoin(options_, *transports_);
  req.server = options_.server;
  absl::StatusOr<member::JoinReply> reply = control_->Join(req, deadline);
  return reply.status();
}

absl::Status PsMember::Leave(transport::Deadline deadline) { return control_->Leave(deadline); }

std::shared_ptr<const member::Plan> PsMember::Current() const {
  std::shared_ptr<const member::Plan> p = control_->LatestPlan();
  if (p == nullptr || !p->ps.has_value() || RankIn(*p) < 0) return nullptr;
  return p;
}

bool PsMember::Superseded(uint32_t epoch) const {
  std::shared_ptr<const member::Plan> p = control_->LatestPlan();
  return p != nullptr && p->epoch > epoch && RankIn(*p) >= 0;
}

absl::StatusOr<std::shared_ptr<const member::Plan>> PsMember::AwaitEpoch(
    uint32_t running, transport::Deadline deadline) const {
  for (;;) {
    std::shared_ptr<const member::Plan> p = Current();
    if (p != nullptr && p->epoch != running) return p;
    if (transport::Clock::now() >= deadline) {
      std::shared_ptr<const member::Plan> latest = control_->LatestPlan();
      std::string why =
          latest == nullptr ? "no plan yet"
          : RankIn(*latest) < 0
              ? absl::StrCat("epoch ", latest->epoch, " does not list this member")
          : !latest->ps.has_value()
              ? absl::StrCat("epoch ", latest->epoch, " has no server holding the model's shards")
              : absl::StrCat("no epoch after ", running);
      return absl::DeadlineExceededError(
          absl::StrCat("parameter-server job '", options_.job, "': waiting for an epoch: ", why));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<std::unique_ptr<transport::Transport>> PsMember::Connect(
    const member::Plan& plan, transport::Deadline deadline) {
  const int rank = RankIn(plan);
  if (rank < 0) return absl::FailedPreconditionError("not a member of the epoch");
  const uint32_t epoch = plan.epoch;
  member::ConnectHooks hooks;
  hooks.deadline = deadline;
  hooks.abandon = [this, epoch] { return Superseded(epoch); };
  return transports_->Connect(plan, rank, hooks);
}

void PsMember::SetRunning(uint32_t epoch) { running_->epoch.store(epoch); }

}  // namespace gradex::ps
