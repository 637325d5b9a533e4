// ControlPlane over the coordinator's gRPC API (proto/gradex/v1). Two
// background threads: one watches the plan stream, one sends heartbeats and
// batches of step reports. Every RPC has a deadline (the plan stream is
// re-opened every watch_window). When the coordinator is unreachable or has
// forgotten this member (restart, eviction: NOT_FOUND), the threads back off
// (100 ms doubling to 2 s, jittered, cut short when the channel reconnects)
// and re-join with the same agent id, the last epoch and rank held, and the
// next step, which is how a restarted coordinator rebuilds its membership.
#ifndef GRADEX_MEMBER_GRPC_CONTROL_PLANE_H_
#define GRADEX_MEMBER_GRPC_CONTROL_PLANE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "member/control_plane.h"

namespace gradex::member {

struct GrpcControlPlaneOptions {
  std::string target;  // host:port of the coordinator
  // TLS: the CA that signed the coordinator's certificate (PEM contents);
  // with client_cert and client_key, mutual TLS. Empty: plaintext.
  std::string tls_ca, tls_client_cert, tls_client_key;
  // The name the coordinator's certificate must carry, when it differs from
  // the host in `target` (e.g. dialling an IP address; no resolver involved).
  std::string tls_server_name;
  std::chrono::milliseconds rpc_timeout{5000};
  std::chrono::milliseconds watch_window{60000};
  // How long the first Join keeps retrying an unreachable coordinator
  // (UNAVAILABLE, DEADLINE_EXCEEDED), each attempt bounded like the caller's
  // deadline; 0: retry within the caller's deadline only. Refusals are final
  // at once.
  std::chrono::milliseconds join_timeout{0};
  // Told about a first Join still waiting (at most every 5 s); may be empty.
  std::function<void(const std::string&)> on_join_progress;
  size_t report_capacity = 256;
  size_t report_batch = 64;
  // After the first report of a batch, wait this long for more before the
  // batch is written (reports are advisory; a little delay costs the
  // controllers nothing).
  std::chrono::milliseconds report_linger{100};
  // Reports are written on one ReportSteps stream that is closed and
  // re-opened this often (a stream that ends without an ack counts its
  // reports as lost). A call per batch instead cost ~0.3-0.6 ms of CPU on
  // each side, several percent of a fast job's step
  // (bench/coordinator_overhead).
  std::chrono::milliseconds report_stream_window{10000};
};

absl::StatusOr<std::unique_ptr<ControlPlane>> CreateGrpcControlPlane(
    const GrpcControlPlaneOptions& options);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_GRPC_CONTROL_PLANE_H_
