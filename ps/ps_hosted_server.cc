#include "ps/ps_hosted_server.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "member/grpc_control_plane.h"
#include "member/member_wiring.h"

namespace gradex::ps {

absl::StatusOr<std::unique_ptr<HostedServer>> HostedServer::Start(HostedServerOptions o) {
  std::unique_ptr<HostedServer> h(new HostedServer());
  h->timeout_ = o.timeout;
  member::MemberWiringOptions wire;
  wire.control.target = o.coordinator;
  wire.control.rpc_timeout =
      std::min<std::chrono::milliseconds>(o.timeout, std::chrono::seconds(5));
  const std::chrono::milliseconds rpc_timeout = wire.control.rpc_timeout;
  wire.data_ip = o.data_ip;
  wire.ucx.connect_timeout = o.timeout;
  absl::StatusOr<member::MemberWiring> wired = member::WireMember(std::move(wire));
  if (!wired.ok()) return wired.status();
  h->control_ = std::move(wired->control);
  h->transports_ = std::move(wired->transports);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  ps::PsMemberOptions m;
  m.job = o.job;
  m.token = o.token;
  m.host = host;
  m.agent_id = absl::StrCat(host, "/ps-server/", getpid());
  m.device = "cpu";
  m.server = true;
  m.rpc_timeout = rpc_timeout;
  h->member_ = std::make_unique<ps::PsMember>(m, h->control_.get(), h->transports_.get());
  if (absl::Status s = h->member_->Join(transport::DeadlineIn(rpc_timeout)); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("parameter server joining ", o.coordinator, ": ", s.message()));
  }
  ps::PsServerOptions so;
  so.snapshot_dir = o.snapshot_dir;
  so.join_timeout = o.timeout;
  so.log = [](const std::string& line) {
    std::fprintf(stderr, "gradex ps server: %s\n", line.c_str());
  };
  h->server_ = std::make_unique<ps::PsServer>(h->member_.get(), so, o.metrics);
  HostedServer* self = h.get();
  h->thread_ = std::thread(
      [self] { self->result_ = self->server_->Run([self] { return self->stop_.load(); }); });
  return h;
}

absl::Status HostedServer::Stop() {
  if (!thread_.joinable()) return result_;
  stop_.store(true);
  thread_.join();
  (void)member_->Leave(transport::DeadlineIn(
      std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5))));
  return result_;
}

HostedServer::~HostedServer() { (void)Stop(); }

}  // namespace gradex::ps
