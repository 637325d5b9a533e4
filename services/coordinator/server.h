// A running coordinator: the gRPC server, the metrics endpoint and the
// ticker thread (leases, epochs, plan publication, stall checks). Used by
// main and by the tests (listen on 127.0.0.1:0 for a free port).
#ifndef GRADEX_SERVICES_COORDINATOR_SERVER_H_
#define GRADEX_SERVICES_COORDINATOR_SERVER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "metrics/metrics_exposer.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "services/coordinator/auth.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/metrics.h"
#include "services/coordinator/service.h"

namespace gradex::coordinator {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";  // host:port; port 0 picks a free one
  bool insecure_listen_any = false;        // allow a non-loopback host without TLS
  TlsFiles tls;                            // cert + key: TLS; + client_ca: mutual TLS
  std::string token;                       // the job token (empty: no token check)
  int metrics_port = -1;                   // -1: none; 0: a free port
  absl::Duration tick = absl::Milliseconds(50);
};

// The name the health service reports for the coordinator's API (besides "").
inline constexpr char kHealthServiceName[] = "gradex.v1.Coordinator";

// True for 127.0.0.0/8, localhost and [::1].
// The numeric loopback address `host` resolves to ("[::1]" for IPv6), or
// INVALID_ARGUMENT when it does not resolve or any address it resolves to
// is not loopback (loopback.cc).
absl::StatusOr<std::string> ResolveLoopback(const std::string& host);
// Splits "host:port" / "[v6]:port"; INVALID_ARGUMENT when malformed.
absl::Status SplitHostPort(const std::string& addr, std::string* host, int* port);

class CoordinatorServer {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(JobSettings job,
                                                                  ServerOptions opts);
  ~CoordinatorServer();

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  Coordinator& coordinator() { return *coordinator_; }
  CoordinatorMetrics& metrics() { return *metrics_; }
  prometheus::Registry& registry() { return *registry_; }
  // Stops accepting calls, ends streams, stops the ticker. Idempotent.
  void Shutdown();
  // Blocks until Shutdown().
  void Wait();

 private:
  CoordinatorServer() = default;

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  metrics::MetricsExposer exposer_;
  std::thread ticker_;
  absl::Notification stop_;
  absl::Notification stopped_;
  int port_ = 0;
  int metrics_port_ = -1;
  bool shut_down_ = false;
};

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_SERVER_H_
