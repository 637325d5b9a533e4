#include "services/coordinator/server.h"

#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "metrics/metrics_exposer.h"
#include "services/coordinator/accept_guard.h"
#include "services/coordinator/limits.h"
#include "services/coordinator/log.h"

namespace gradex::coordinator {
namespace {
constexpr int kHandshakeTimeoutMs = 10'000;
constexpr int kConnectionIdleMs = 60'000;
}  // namespace

absl::Status SplitHostPort(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", addr, "' is not host:port"));
  }
  std::string h = addr.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = -1;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", addr, "': bad port"));
  }
  *host = h;
  *port = p;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(JobSettings job,
                                                                            ServerOptions opts) {
  std::string host;
  int want_port = 0;
  if (absl::Status s = SplitHostPort(opts.listen, &host, &want_port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--listen: ", s.message()));
  }
  const bool tls = !opts.tls.cert.empty() || !opts.tls.key.empty();
  if (tls && (opts.tls.cert.empty() || opts.tls.key.empty())) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (!tls && !opts.tls.client_ca.empty()) {
    return absl::InvalidArgumentError("--client-ca needs --tls-cert and --tls-key");
  }
  if (!tls && !opts.insecure_listen_any) {
    absl::StatusOr<std::string> numeric = ResolveLoopback(host);
    if (!numeric.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen ", opts.listen, ": ", numeric.status().message(),
                       ": without TLS the coordinator listens on loopback only "
                       "(give --tls-cert/--tls-key, or --insecure-listen-any)"));
    }
    opts.listen = absl::StrCat(*numeric, ":", want_port);  // bind what was checked
    host = *numeric;
    if (host.front() == '[') host = host.substr(1, host.size() - 2);
  }
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (tls) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> c = MakeTlsCredentials(opts.tls);
    if (!c.ok()) return c.status();
    creds = *c;
  }

  std::unique_ptr<CoordinatorServer> s(new CoordinatorServer());
  s->registry_ = std::make_shared<prometheus::Registry>();
  s->metrics_ = std::make_unique<CoordinatorMetrics>(*s->registry_);
  s->coordinator_ = std::make_unique<Coordinator>(job, s->metrics_.get());
  if (opts.token.empty()) {
    Log("warning: no --token-file: any client that reaches the port may join");
  }
  s->service_ = std::make_unique<CoordinatorService>(s->coordinator_.get(), s->metrics_.get(),
                                                     TokenAuth(opts.token));
  // grpc.health.v1.Health: Kubernetes' grpc probes and gradex-health-probe.
  // It answers without the job token (it says nothing about the job).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder b;
  b.AddListeningPort(opts.listen, creds, &s->port_);
  b.RegisterService(s->service_.get());
  b.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  b.SetMaxSendMessageSize(kMaxSendMessageBytes);
  // Descriptors are bounded by who completes a handshake and keeps using
  // the connection: one that never finishes its TLS / HTTP/2 handshake is
  // closed after kHandshakeTimeoutMs, one with no call for kConnectionIdleMs gets
  // GOAWAY (an agent always has its WatchPlan stream open). The cap on
  // descriptors is the listener's (accept_guard.h).
  b.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kHandshakeTimeoutMs);
  b.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kConnectionIdleMs);
  s->server_ = b.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", opts.listen,
                     ". Fix: another process may hold the port; choose another --listen port, "
                     "or port 0 for any free one"));
  }
  // "" (the server) is SERVING from the default service; the API's own name too.
  s->server_->GetHealthCheckService()->SetServingStatus(kHealthServiceName, true);
  if (opts.metrics_port >= 0) {
    // The metrics endpoint binds where the API does (loopback unless opened).
    const std::string bind = absl::StrCat(
        host.find(':') != std::string::npos ? "[" + host + "]" : host, ":", opts.metrics_port);
    try {
      s->exposer_ = metrics::MakeMetricsExposer(bind);
    } catch (const std::exception& e) {  // civetweb reports bind failures by throwing
      s->server_->Shutdown();
      return absl::UnavailableError(absl::StrCat(
          "--metrics-port: cannot listen on ", bind, ": ", absl::StripSuffix(e.what(), "."),
          ". Fix: another process may hold the port; choose another --metrics-port, "
          "or 0 for any free one"));
    }
    s->exposer_->RegisterCollectable(s->registry_);
    std::vector<int> ports = s->exposer_->GetListeningPorts();
    s->metrics_port_ = ports.empty() ? -1 : ports[0];
  }
  CoordinatorServer* raw = s.get();
  const absl::Duration tick = opts.tick;
  s->ticker_ = std::thread([raw, tick] {
    AcceptGuardCounts seen;
    while (!raw->stop_.WaitForNotificationWithTimeout(tick)) {
      raw->coordinator_->Tick(absl::Now());
      // The listener's refusals (accept_guard.h): counted, and one log line
      // per tick that had any.
      const AcceptGuardCounts now = AcceptGuardTotals();
      if (now.over_cap != seen.over_cap || now.exhausted != seen.exhausted) {
        raw->metrics_->connections_over_cap.Increment(now.over_cap - seen.over_cap);
        raw->metrics_->connections_exhausted.Increment(now.exhausted - seen.exhausted);
        Log("listener: closed ", now.over_cap - seen.over_cap,
            " connections over the descriptor cap and ", now.exhausted - seen.exhausted,
            " with no descriptor left (totals ", now.over_cap, ", ", now.exhausted, ")");
        seen = now;
      }
    }
  });
  Log("job '", job.job_id, "': serving on ", opts.listen, " (port ", s->port_, ", ",
      tls ? (opts.tls.client_ca.empty() ? "TLS" : "mutual TLS") : "plaintext", ")",
      s->metrics_port_ >= 0 ? absl::StrCat(", metrics on port ", s->metrics_port_) : "");
  return s;
}

void CoordinatorServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  // Readiness drops before the listener closes.
  if (server_ && server_->GetHealthCheckService()) server_->GetHealthCheckService()->Shutdown();
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  // Streams are cancelled after the deadline; WatchPlan never ends by itself.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  exposer_.reset();
  stopped_.Notify();
}

void CoordinatorServer::Wait() { stopped_.WaitForNotification(); }

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

}  // namespace gradex::coordinator
