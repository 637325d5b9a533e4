// gradex-agent's command line (main.cc): its flags, their usage text and
// their parsing and checks.
#ifndef GRADEX_AGENT_AGENT_CLI_FLAGS_H_
#define GRADEX_AGENT_AGENT_CLI_FLAGS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "member/grpc_control_plane.h"

namespace gradex::agent {

// The --help text.
extern const char kUsage[];

struct Flags {
  member::GrpcControlPlaneOptions grpc;
  std::string job, token_file, agent_id, ucx_tls, data_ip, tls_ca, tls_cert, tls_key;
  std::string snapshot_dir;  // --role server (`server`)
  std::string node;          // empty: GRADEX_NODE, else the host name
  bool hierarchy_off = false;
  size_t elements = 0;
  uint64_t steps = 0, seed = 1;
  int buckets = 1, metrics_port = -1, local_rank = 0;
  bool metrics_any = false, quiet = false, check_invariants = false, server = false;
  int64_t join_timeout_ms = 120000;
  int64_t join_timeout_s = 120;
  int64_t report_linger_ms = 100;
  uint64_t corrupt_step = ~uint64_t{0};
  uint64_t stall_step = ~uint64_t{0};
  int64_t stall_ms = 0;
  int stall_entry = 0;
  int64_t tag_flood_mib = 0;
};

// CANCELLED for --help; INVALID_ARGUMENT naming the flag for bad input.
absl::Status Parse(int argc, char** argv, Flags* f);

}  // namespace gradex::agent

#endif  // GRADEX_AGENT_AGENT_CLI_FLAGS_H_
