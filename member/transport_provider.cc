#include "member/transport_provider.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::member {
namespace {

class UcxProvider final : public TransportProvider {
 public:
  UcxProvider(std::shared_ptr<transport::ucx::UcxWorker> worker,
              const transport::ucx::UcxOptions& options)
      : worker_(std::move(worker)), options_(options) {}
  std::string address() const override { return worker_->address(); }
  void UseJobSecret(const std::string& token) override { worker_->SetJobSecret(token); }
  std::string version() const override { return transport::ucx::UcxVersion(); }
  std::string transports() const override {
    if (!options_.tls.empty()) return options_.tls;
    const char* env = std::getenv("UCX_TLS");
    return env != nullptr && *env != '\0' ? env : "all";
  }
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const Plan& plan, int rank, const ConnectHooks& hooks) override {
    absl::StatusOr<std::vector<std::string>> addresses = PlanAddresses(plan);
    if (!addresses.ok()) return addresses.status();
    transport::ucx::UcxOptions o = options_;
    // The agent's entry deadline bounds the wire-up: the coordinator evicts
    // whoever has not entered by then, and a newer epoch follows.
    o.connect_timeout = std::max(std::chrono::milliseconds(1),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(
                                     hooks.deadline - transport::Clock::now()));
    o.abandon = hooks.abandon;
    o.on_wire_up_wait = hooks.waiting;
    o.wire_up_quiet = hooks.quiet;
    return transport::ucx::ConnectUcxTransport(worker_, rank, *addresses, plan.epoch, o);
  }

 private:
  std::shared_ptr<transport::ucx::UcxWorker> worker_;
  transport::ucx::UcxOptions options_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransportProvider>> CreateUcxProvider(
    const transport::ucx::UcxOptions& options) {
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
      transport::ucx::CreateUcxWorker(options);
  if (!worker.ok()) return worker.status();
  return std::unique_ptr<TransportProvider>(new UcxProvider(*std::move(worker), options));
}

absl::StatusOr<std::vector<std::string>> PlanAddresses(const Plan& plan) {
  std::vector<std::string> out(plan.members.size());
  std::vector<bool> seen(plan.members.size(), false);
  for (const PlanMember& m : plan.members) {
    if (m.rank < 0 || m.rank >= plan.world() || seen[m.rank]) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", plan.version, ": rank ", m.rank, " out of range or repeated"));
    }
    seen[m.rank] = true;
    out[m.rank] = m.ucx_address;
  }
  return out;
}

ControlPlaneBootstrap::ControlPlaneBootstrap(std::shared_ptr<const Plan> plan, std::string agent_id)
    : plan_(std::move(plan)), agent_id_(std::move(agent_id)) {
  rank_ = plan_->RankOf(agent_id_);
}

absl::StatusOr<std::vector<std::string>> ControlPlaneBootstrap::AllGather(
    const std::string& mine, transport::Deadline deadline) {
  if (rank_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(agent_id_, " is not a member of epoch ", plan_->epoch));
  }
  absl::StatusOr<std::vector<std::string>> all = PlanAddresses(*plan_);
  if (!all.ok()) return all.status();
  if ((*all)[rank_] != mine) {
    return absl::FailedPreconditionError(absl::StrCat(
        "epoch ", plan_->epoch, " lists another UCX address for ", agent_id_, " (stale join?)"));
  }
  return all;
}

}  // namespace gradex::member
