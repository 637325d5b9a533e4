#include "ps/server_role.h"

#include <csignal>
#include <cstdio>
#include <iostream>

#include "ps/ps_server.h"
#include "ps/ps_server_metrics.h"

namespace gradex::ps {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

}  // namespace

int RunServerRole(const ServerRoleOptions& o, member::ControlPlane* control,
                  member::TransportProvider* transports, pipeline::AgentMetrics* metrics) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  PsMember member(o.member, control, transports);
  if (absl::Status s = member.Join(transport::DeadlineIn(o.member.rpc_timeout)); !s.ok()) {
    std::cerr << "gradex-agent --role server: join: " << s << "\n";
    return 1;
  }
  PsServerMetrics server_metrics(*metrics->registry());
  PsServerOptions so;
  so.snapshot_dir = o.snapshot_dir;
  so.join_timeout = o.join_timeout;
  so.log = [quiet = o.quiet](const std::string& line) {
    if (!quiet) {
      std::printf("server: %s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  PsServer server(&member, so, &server_metrics);
  absl::Status s = server.Run([] { return g_stop != 0; });
  const PsServerStatus st = server.Status();
  for (const PsServerStatus::Shard& shard : st.shards) {
    std::printf(
        "server: shard %u version %llu pushes %llu pulls %llu full syncs %llu refused %llu\n",
        shard.shard, static_cast<unsigned long long>(shard.version),
        static_cast<unsigned long long>(shard.stats.pushes),
        static_cast<unsigned long long>(shard.stats.pulls),
        static_cast<unsigned long long>(shard.stats.full_syncs),
        static_cast<unsigned long long>(shard.refused));
  }
  std::fflush(stdout);
  (void)member.Leave(transport::DeadlineIn(o.member.rpc_timeout));
  if (!s.ok()) {
    std::cerr << "gradex-agent --role server: " << s << "\n";
    return 1;
  }
  return 0;
}

int RunServerRole(const pipeline::AgentOptions& a, std::chrono::milliseconds rpc_timeout,
                  const std::string& snapshot_dir, bool quiet, member::ControlPlane* control,
                  member::TransportProvider* transports, pipeline::AgentMetrics* metrics) {
  ServerRoleOptions r;
  r.member = {a.job, a.token, a.agent_id, a.host, "cpu", a.local_rank, true, rpc_timeout};
  r.snapshot_dir = snapshot_dir;
  r.join_timeout = a.join_timeout;
  r.quiet = quiet;
  return RunServerRole(r, control, transports, metrics);
}

}  // namespace gradex::ps
