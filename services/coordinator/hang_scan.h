// The hang diagnosis read from the members' heartbeats: an epoch's waits
// (ScanWaits) and the line naming the cause (DescribeHang), over the pure
// wait-for graph of hangs/wait_graph.h. Here, above membership/, because it
// reads the members' records; hangs/ stays pure logic below membership/.
#ifndef GRADEX_SERVICES_COORDINATOR_HANG_SCAN_H_
#define GRADEX_SERVICES_COORDINATOR_HANG_SCAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator {

// The waits of an epoch's ranks as the members' last heartbeats tell them. A
// wait counts while it is live: the last heartbeat carried it, of this epoch,
// in the step the member runs next (a report of that step ends it).
struct EpochWaits {
  std::vector<int> waits_on;  // by rank, -1 when not waiting
  bool any = false;
  uint64_t step = 0;      // the smallest step a rank waits in
  absl::Duration oldest;  // the longest wait, aged since its heartbeat
};
EpochWaits ScanWaits(const membership::Membership& m, const membership::Epoch& run, absl::Time now);

// One line naming the cause: "rank 2 (host 'h') is not in the exchange of step
// 7: ranks 0, 1, 3 wait on it", or a cycle, or a member whose heartbeats
// stopped (none for `silence`) or that is gone, and the ranks whose heartbeats
// say they still run an older epoch. Empty when nobody waits.
std::string DescribeHang(const membership::Membership& m, const membership::Epoch& run,
                         const EpochWaits& w, absl::Time now, absl::Duration silence);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_HANG_SCAN_H_
