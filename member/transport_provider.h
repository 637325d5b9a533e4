// Where the agent's communicators come from: an address to publish at join,
// and one Transport per epoch built from the epoch's plan. UCX in production;
// tests pass loopback fabrics.
#ifndef GRADEX_MEMBER_TRANSPORT_PROVIDER_H_
#define GRADEX_MEMBER_TRANSPORT_PROVIDER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "member/control_plane.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::member {

// What an epoch's connect gets besides the plan.
struct ConnectHooks {
  // The wire-up ends DEADLINE_EXCEEDED by then, or (when non-zero) `quiet`
  // after the last peer that answered it (UcxOptions::wire_up_quiet).
  transport::Deadline deadline = transport::DeadlineIn(std::chrono::milliseconds(30000));
  std::chrono::milliseconds quiet{0};
  // May be empty; polled while connecting: true ends it ABORTED (a newer
  // epoch superseded this one).
  std::function<bool()> abandon;
  // May be empty; told which peers the wire-up waits on: (peer, true) as it
  // starts waiting on `peer`, (peer, false) once that peer answered or the
  // wire-up ended (UcxOptions::on_wire_up_wait).
  std::function<void(int peer, bool waiting)> waiting;
};

class TransportProvider {
 public:
  virtual ~TransportProvider() = default;
  // Published through Join; the plan hands it to the peers.
  virtual std::string address() const = 0;
  // Published through Join so that the coordinator refuses a member its
  // peers could not connect to: the UCX version and transports ("" when
  // not UCX).
  virtual std::string version() const { return ""; }
  virtual std::string transports() const { return ""; }
  // The job's token: UCX workers prove it to each other before any byte
  // reaches UCX (transport/ucx/hello.h). Set as the member joins.
  virtual void UseJobSecret(const std::string& token) {}
  // The communicator of `plan`'s epoch as `rank`, wired up by
  // hooks.deadline. The previous one is destroyed before this is called.
  virtual absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const Plan& plan, int rank, const ConnectHooks& hooks) = 0;
};

// A provider that hands everything to `inner` (which it owns): the base of
// the fault injectors (gradex-agent's --debug-* flags), which override
// Connect only.
class ForwardingProvider : public TransportProvider {
 public:
  explicit ForwardingProvider(std::unique_ptr<TransportProvider> inner)
      : inner_(std::move(inner)) {}
  std::string address() const override { return inner_->address(); }
  std::string version() const override { return inner_->version(); }
  std::string transports() const override { return inner_->transports(); }
  void UseJobSecret(const std::string& token) override { inner_->UseJobSecret(token); }
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const Plan& plan, int rank, const ConnectHooks& hooks) override {
    return inner_->Connect(plan, rank, hooks);
  }

 protected:
  TransportProvider& inner() const { return *inner_; }

 private:
  std::unique_ptr<TransportProvider> inner_;
};

// The fields of a Join every member sends alike (agents and parameter-server
// members): who it is, from its options (AgentOptions, PsMemberOptions: the
// same field names), and its data-plane address, UCX version and transports,
// which the coordinator checks and hands to its peers. The token also keys the
// data plane's hellos from now on (TransportProvider::UseJobSecret): every
// member joins through here.
template <typename Options>
JoinRequest MemberJoin(const Options& o, TransportProvider& t) {
  t.UseJobSecret(o.token);
  JoinRequest req;
  req.job = o.job;
  req.token = o.token;
  req.agent_id = o.agent_id;
  req.host = o.host;
  req.local_rank = o.local_rank;
  req.device = o.device;
  req.ucx_address = t.address();
  req.ucx_version = t.version();
  req.ucx_transports = t.transports();
  return req;
}

// One UCX worker for the agent's whole life (its address stays valid across
// epochs, so the coordinator needs it once), one communicator per epoch on it
// with the epoch as the generation (an aborted epoch's leftovers are dropped).
absl::StatusOr<std::unique_ptr<TransportProvider>> CreateUcxProvider(
    const transport::ucx::UcxOptions& options);

// A Bootstrap whose all-gather is the plan of an epoch: each rank published
// its address through Join, and the plan lists every rank's. For code that
// wants a Bootstrap (CreateUcxTransport); the agent connects from the plan.
class ControlPlaneBootstrap final : public transport::Bootstrap {
 public:
  ControlPlaneBootstrap(std::shared_ptr<const Plan> plan, std::string agent_id);
  int rank() const override { return rank_; }
  int size() const override { return plan_->world(); }
  // Checks that the plan lists `mine` for this rank and returns the plan's
  // addresses by rank.
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine,
                                                     transport::Deadline deadline) override;

 private:
  std::shared_ptr<const Plan> plan_;
  std::string agent_id_;
  int rank_ = -1;
};

// The addresses of `plan` by rank; an error if ranks are not dense 0..P-1.
absl::StatusOr<std::vector<std::string>> PlanAddresses(const Plan& plan);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_TRANSPORT_PROVIDER_H_
