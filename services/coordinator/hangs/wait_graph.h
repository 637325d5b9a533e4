// Hang diagnosis from the wait-for graph of one epoch's ranks: each rank's
// heartbeat says which peer its step waits on (at most one: the oldest
// pending receive). Following those edges from every waiter ends either at a
// rank that is not waiting (the cause: it is not in the exchange, or silent,
// or gone) or in a cycle (ranks waiting on each other). Pure logic.
#ifndef GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_
#define GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "services/coordinator/membership/membership.h"

namespace gradex::coordinator::hangs {

struct WaitCause {
  // A cause: one rank; a cycle: its ranks in wait order, from the smallest.
  std::vector<int> ranks;
  std::vector<int> waiters;  // the other ranks that (transitively) wait on it, sorted
};

struct WaitDiagnosis {
  std::vector<WaitCause> causes;  // ranks waited on that do not wait, by rank
  std::vector<WaitCause> cycles;  // by their smallest rank
  bool empty() const { return causes.empty() && cycles.empty(); }
};

// waits_on[r]: the rank r waits on, or -1 when it does not wait (values
// outside 0..P-1 count as -1).
WaitDiagnosis DiagnoseWaits(const std::vector<int>& waits_on);

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

}  // namespace gradex::coordinator::hangs

#endif  // GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_
