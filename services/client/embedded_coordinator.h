// Where the client's coordinator comes from: the one the
// options name (GRADEX_COORDINATOR, with GRADEX_TOKEN[_FILE]), else, on rank
// 0, one started in this process on an ephemeral port with a fresh random
// token, published through the trainer's rendezvous under kCoordinatorKey and
// kTokenKey; the other ranks read them there.
#ifndef GRADEX_SERVICES_CLIENT_EMBEDDED_COORDINATOR_H_
#define GRADEX_SERVICES_CLIENT_EMBEDDED_COORDINATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "gradex/v1/job_config.pb.h"
#include "services/client/client.h"
#include "services/coordinator/server.h"

namespace gradex::client {

inline constexpr char kCoordinatorKey[] = "gradex/coordinator";
inline constexpr char kTokenKey[] = "gradex/token";

struct CoordinatorEndpoint {
  std::string address;  // host:port
  std::string token;
  // Set on the rank that runs it (shut down when the client closes).
  std::unique_ptr<coordinator::CoordinatorServer> server;
};

// `job_json`: the embedded coordinator's job config; empty: EmbeddedJobConfig.
absl::StatusOr<CoordinatorEndpoint> FindCoordinator(const ClientOptions& options,
                                                    const Rendezvous& rendezvous,
                                                    const std::string& job_json = "");

// The embedded coordinator's job config (JSON, coordinator/job_config.h's
// format) for `options`: "auto" is the catalog's default until the
// coordinator knows it; the step deadline and rendezvous timeout are the
// client's timeout.
absl::StatusOr<std::string> EmbeddedJobConfig(const ClientOptions& options);

// `config` as the JSON a job config file holds (protobuf's printer, the
// proto's field names).
std::string JobConfigJson(const gradex::v1::JobConfig& config);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_EMBEDDED_COORDINATOR_H_
