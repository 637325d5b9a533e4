// Fault injection (gradex-agent --debug-tag-flood MIB): a TransportProvider
// whose communicators, besides every real message, send 64 KiB messages on
// tags no schedule receives, up to MIB MiB to each peer per epoch, as a
// member flooding its peers' unexpected queues. For the hostile-member suite:
// the peers drain and count them, blame this rank past their cap and fail
// the step naming it (UcxOptions::unexpected_*_per_peer).
#ifndef GRADEX_AGENT_FAULTS_TAG_FLOOD_FAULT_H_
#define GRADEX_AGENT_FAULTS_TAG_FLOOD_FAULT_H_

#include <cstddef>
#include <memory>

#include "member/transport_provider.h"

namespace gradex::agent::faults {

std::unique_ptr<member::TransportProvider> TagFloodFault(
    std::unique_ptr<member::TransportProvider> inner, size_t mib_per_peer);

}  // namespace gradex::agent::faults

#endif  // GRADEX_AGENT_FAULTS_TAG_FLOOD_FAULT_H_
