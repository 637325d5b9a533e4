// gradex-agent: the agent runtime driven by synthetic seeded gradients, for
// cluster validation and benchmarks (like nccl-tests). Algorithm, density and
// teams come from the coordinator's plan.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "agent/agent_cli_flags.h"
#include "agent/agent_cli_run.h"
#include "version/version.h"

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-agent")) return 0;
  gradex::agent::Flags f;
  absl::Status s = gradex::agent::Parse(argc, argv, &f);
  if (absl::IsCancelled(s)) {
    std::fputs(gradex::agent::kUsage, stdout);
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "gradex-agent: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return gradex::agent::Run(f);
}
