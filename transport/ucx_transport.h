// Transport over UCX (UCP tag matching): one UCP context and worker per rank,
// endpoints to every peer from addresses exchanged through a Bootstrap.
// Honours UCX_TLS and the other UCX_* environment variables.
#ifndef GRADEX_TRANSPORT_UCX_TRANSPORT_H_
#define GRADEX_TRANSPORT_UCX_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace gradex {

struct UcxOptions {
  // Deadline for bootstrap + endpoint wire-up.
  std::chrono::milliseconds connect_timeout{30000};
};

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(Bootstrap& bootstrap,
                                                              const UcxOptions& options);

}  // namespace gradex

#endif  // GRADEX_TRANSPORT_UCX_TRANSPORT_H_
