// Loopback transport: P ranks as threads of one process sharing a fabric
// (loopback_fabric.h) with no delivery-time policy. For tests; also lets a
// test kill a rank (its peers then fail fast).
#ifndef GRADEX_TRANSPORT_LOOPBACK_TRANSPORT_H_
#define GRADEX_TRANSPORT_LOOPBACK_TRANSPORT_H_

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gradex::transport {

// Creates a fabric of `size` ranks and returns one Transport per rank.
std::vector<std::unique_ptr<Transport>> CreateLoopbackTransports(int size);

// Marks `rank` dead: its pending and future operations fail, and peers waiting
// on it get UNAVAILABLE instead of waiting for their deadline. Works on any
// rank of a fabric (a simulated world's too); no-op for other transports.
void KillLoopbackRank(Transport& any_rank_of_fabric, int rank);

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_LOOPBACK_TRANSPORT_H_
