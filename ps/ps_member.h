// What every member of a parameter-server job (DGS) shares, worker
// or server: joining the coordinator with its role, finding the newest epoch
// that lists it with server shards, and that epoch's communicator. There is
// no step all members share, so a member moves to a newer epoch as soon as it
// sees one (a worker between two of its steps, a server between two polls).
#ifndef GRADEX_PS_PS_MEMBER_H_
#define GRADEX_PS_PS_MEMBER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "member/control_plane.h"
#include "member/transport_provider.h"
#include "transport/transport.h"

namespace gradex::ps {

struct PsMemberOptions {
  std::string job, token, agent_id, host, device;
  int local_rank = 0;
  bool server = false;
  std::chrono::milliseconds rpc_timeout{5000};
};

// The job's id on the DGS frames (DgsJob::job_id): FNV-1a 64 of its name.
uint64_t PsJobId(const std::string& job);

class PsMember {
 public:
  PsMember(PsMemberOptions options, member::ControlPlane* control,
           member::TransportProvider* transports);

  // Joins with the member's role (the control plane re-joins by itself
  // after an eviction or a coordinator restart).
  absl::Status Join(transport::Deadline deadline);
  absl::Status Leave(transport::Deadline deadline);

  // The newest plan that lists this member and carries server shards, or
  // null.
  std::shared_ptr<const member::Plan> Current() const;
  // Waits (polling the control plane's latest plan) for Current() with an
  // epoch other than `running`; DEADLINE_EXCEEDED naming what it waited for.
  absl::StatusOr<std::shared_ptr<const member::Plan>> AwaitEpoch(
      uint32_t running, transport::Deadline deadline) const;
  // Whether a newer epoch than `epoch` that lists this member is published.
  bool Superseded(uint32_t epoch) const;
  // The communicator of `plan`'s epoch (the previous one must be gone), wired
  // up by `deadline`; abandoned (ABORTED) when a newer epoch appears meanwhile.
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(const member::Plan& plan,
                                                                transport::Deadline deadline);
  // Heartbeats say this epoch runs (the coordinator's entry deadline).
  void SetRunning(uint32_t epoch);

  int RankIn(const member::Plan& plan) const { return plan.RankOf(options_.agent_id); }
  const PsMemberOptions& options() const { return options_; }

 private:
  class Running;
  PsMemberOptions options_;
  member::ControlPlane* control_;
  member::TransportProvider* transports_;
  std::shared_ptr<Running> running_;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_MEMBER_H_
