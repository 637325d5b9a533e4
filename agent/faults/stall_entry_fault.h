// Fault injection (gradex-agent --debug-stall-entry): a TransportProvider
// whose K-th connect never reaches the transport, as an agent whose thread
// hangs inside an epoch's UCX wire-up: it never connects to its peers and
// never sends its wire-up byte, while its heartbeats go on and name the epoch
// it enters. For the hostile-member suite (tests/hostile: a member that
// entered an earlier epoch and stalls a later entry).
#ifndef GRADEX_AGENT_FAULTS_STALL_ENTRY_FAULT_H_
#define GRADEX_AGENT_FAULTS_STALL_ENTRY_FAULT_H_

#include <chrono>
#include <memory>

#include "member/transport_provider.h"

namespace gradex::agent::faults {

// Wraps `inner`; its `entry`-th Connect (counting from 1) stays out for up
// to `at_most`, or until the connect is abandoned (a newer epoch superseded
// it), then fails UNAVAILABLE (or ABORTED) naming the fault. Every other
// connect is inner's.
std::unique_ptr<member::TransportProvider> StallEntryFault(
    std::unique_ptr<member::TransportProvider> inner, int entry, std::chrono::milliseconds at_most);

}  // namespace gradex::agent::faults

#endif  // GRADEX_AGENT_FAULTS_STALL_ENTRY_FAULT_H_
