// gradex-coordinator's command line.
#ifndef GRADEX_SERVICES_COORDINATOR_FLAGS_H_
#define GRADEX_SERVICES_COORDINATOR_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gradex::coordinator {

struct Flags {
  bool help = false;
  std::string listen = "127.0.0.1:50051";
  int metrics_port = -1;
  std::string job_config, tls_cert, tls_key, client_ca, token_file;
  bool insecure_listen_any = false;
};

// INVALID_ARGUMENT naming the flag for anything unknown, missing or bad.
absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args);
const char* Usage();

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_FLAGS_H_
