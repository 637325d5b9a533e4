// Hang diagnosis from the wait-for graph of one epoch's ranks: each rank's
// heartbeat says which peer its step waits on (at most one: the oldest
// pending receive). Following those edges from every waiter ends either at a
// rank that is not waiting (the cause: it is not in the exchange, or silent,
// or gone) or in a cycle (ranks waiting on each other). Pure logic.
#ifndef GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_
#define GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_

#include <vector>

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

}  // namespace gradex::coordinator::hangs

#endif  // GRADEX_SERVICES_COORDINATOR_HANGS_WAIT_GRAPH_H_
