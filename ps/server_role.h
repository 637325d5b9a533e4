// gradex-agent --role server: joins a parameter-server job (algorithm "dgs")
// as a SERVER and runs PsServer (ps_server.h) until SIGINT or SIGTERM, then
// writes a last snapshot and leaves.
#ifndef GRADEX_PS_SERVER_ROLE_H_
#define GRADEX_PS_SERVER_ROLE_H_

#include <chrono>
#include <string>

#include "member/control_plane.h"
#include "member/transport_provider.h"
#include "pipeline/agent.h"
#include "pipeline/agent_metrics.h"
#include "ps/ps_member.h"

namespace gradex::ps {

struct ServerRoleOptions {
  PsMemberOptions member;
  std::string snapshot_dir;                        // "" = no snapshots
  std::chrono::milliseconds join_timeout{120000};  // for the first epoch with shards
  bool quiet = false;
};

// The process's exit status: 0 after a signal, 1 when joining or serving
// failed (the error on stderr).
int RunServerRole(const ServerRoleOptions& options, member::ControlPlane* control,
                  member::TransportProvider* transports, pipeline::AgentMetrics* metrics);
// The same from gradex-agent's options (job, token, identity, join timeout).
int RunServerRole(const pipeline::AgentOptions& agent, std::chrono::milliseconds rpc_timeout,
                  const std::string& snapshot_dir, bool quiet, member::ControlPlane* control,
                  member::TransportProvider* transports, pipeline::AgentMetrics* metrics);

}  // namespace gradex::ps

#endif  // GRADEX_PS_SERVER_ROLE_H_
