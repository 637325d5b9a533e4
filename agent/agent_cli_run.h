// gradex-agent's run (main.cc): the control and data planes from the flags,
// then the server role or the step loop on synthetic gradients.
#ifndef GRADEX_AGENT_AGENT_CLI_RUN_H_
#define GRADEX_AGENT_AGENT_CLI_RUN_H_

#include "agent/agent_cli_flags.h"

namespace gradex::agent {

// The process's exit status: 0 done, 1 a failure to run, 2 bad input or
// setup, 3 an invariant violated.
int Run(const Flags& f);

}  // namespace gradex::agent

#endif  // GRADEX_AGENT_AGENT_CLI_RUN_H_
