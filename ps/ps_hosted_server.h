// The server role hosted in a trainer's process (rank 0 with the embedded
// coordinator, ps_worker.h): its own control plane, UCX worker and member
// (role SERVER), and one thread running ps::PsServer until Stop.
#ifndef GRADEX_PS_PS_HOSTED_SERVER_H_
#define GRADEX_PS_PS_HOSTED_SERVER_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "member/control_plane.h"
#include "member/transport_provider.h"
#include "ps/ps_member.h"
#include "ps/ps_server.h"

namespace gradex::ps {

struct HostedServerOptions {
  std::string coordinator, token, job, data_ip, snapshot_dir;
  std::chrono::milliseconds timeout{60000};
  // May be null: the server's metrics go to this registry's exposer.
  ps::PsServerMetrics* metrics = nullptr;
};

class HostedServer {
 public:
  static absl::StatusOr<std::unique_ptr<HostedServer>> Start(HostedServerOptions options);
  ~HostedServer();
  // Stops serving (a last snapshot), leaves the job; returns Run's outcome.
  absl::Status Stop();
  ps::PsServerStatus Status() const { return server_->Status(); }

 private:
  HostedServer() = default;
  std::unique_ptr<member::ControlPlane> control_;
  std::unique_ptr<member::TransportProvider> transports_;
  std::unique_ptr<ps::PsMember> member_;
  std::unique_ptr<ps::PsServer> server_;
  std::atomic<bool> stop_{false};
  absl::Status result_;
  std::thread thread_;
  std::chrono::milliseconds timeout_{60000};
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_HOSTED_SERVER_H_
