// Transport over UCX (UCP tag matching): one UCP context and worker per rank,
// endpoints to every peer from addresses exchanged through a Bootstrap.
// Honours UCX_TLS and the other UCX_* environment variables; the options
// below override them for this transport only.
//
// Wire tag layout: UCP tag matching carries no source, so bit 63 marks the
// transport's own control messages, bits 48..62 hold the sender's rank (so at
// most 32767 ranks) and bits 0..47 the user tag. Receives match all 64 bits.
// Self-sends bypass UCX and are matched locally (no "self" TLS needed).
#ifndef GRADEX_TRANSPORT_UCX_TRANSPORT_H_
#define GRADEX_TRANSPORT_UCX_TRANSPORT_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace gradex {

struct UcxOptions {
  // Deadline for bootstrap + endpoint wire-up.
  std::chrono::milliseconds connect_timeout{30000};
  // When non-empty, overrides UCX_TLS (e.g. "tcp", "posix", "sm").
  std::string tls;
  // UCX disables peer-failure handling on posix/sysv shared memory by default,
  // which with our error-handling endpoints would silently push same-host
  // traffic onto TCP. Enabled unless the environment sets the variables.
  bool shm_error_handling = true;
  // How often UCX probes idle peers (UCX_KEEPALIVE_INTERVAL, default 20 s in
  // UCX 1.13): bounds how long a dead peer on a quiet link goes unnoticed.
  // Zero keeps UCX's setting.
  std::chrono::milliseconds keepalive_interval{1000};
  // Teardown budget for flushing and closing endpoints in the destructor.
  std::chrono::milliseconds close_timeout{2000};
};

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(Bootstrap& bootstrap,
                                                              const UcxOptions& options);

}  // namespace gradex

#endif  // GRADEX_TRANSPORT_UCX_TRANSPORT_H_
