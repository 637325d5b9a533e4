// Simulated transport for scale studies: the loopback fabric (P ranks as
// threads of one process, real payloads delivered, so the real algorithm code
// runs; loopback_fabric.h) plus a delivery-time policy that keeps a virtual
// clock per rank under the α-β(-γ) model.
//
// The model (per rank r, clock now[r], outgoing link free at link[r]):
// - A send of m bytes posted at now[r] starts when r's outgoing link is free,
//   start = max(now[r], link[r]), occupies the link for α + β·m (α is paid per
//   message, so several sends posted at once serialise, as the seeds' Table 1
//   counts them), and arrives at start + α + β·m. Posting costs no time.
// - Waiting on (or a successful Test of) a send advances now[r] to the end of
//   its transmission; on a receive, to max(now[r], arrival) + γ·(bytes / 4):
//   γ is charged per received 4-byte word, standing for the reduction of what
//   arrived (an index or a value), because the transport cannot know how many
//   elements the algorithm reduces.
// - Compute between communications (selection, merges) costs no virtual time;
//   only γ models it.
// - Incoming links are not modelled (full duplex, no incast contention): a
//   receiver-side queue would order messages by real-thread interleaving,
//   making virtual times nondeterministic without a global event queue.
// - Messages to oneself are free (arrive at the sender's now, no link use).
// Time is deterministic as long as the algorithm's schedule does not depend
// on which message happens to arrive first in real time.
#ifndef GRADEX_TRANSPORT_SIM_TRANSPORT_H_
#define GRADEX_TRANSPORT_SIM_TRANSPORT_H_

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gradex::transport {

struct SimParams {
  double alpha_s = 20e-6;             // latency per message, seconds
  double beta_s_per_byte = 8 / 25e9;  // seconds per byte (25 Gbit/s)
  double gamma_s_per_word = 0;        // seconds per received 4-byte word
};

// Creates a simulated world of `size` ranks; every clock starts at 0.
std::vector<std::unique_ptr<Transport>> CreateSimTransports(int size, const SimParams& params);

// The virtual clock of a sim rank (seconds); -1 for another Transport.
double SimNow(const Transport& t);

// Sets the rank's clock and frees its outgoing link at `now` (e.g. 0 before a
// timed call, once every rank has finished the previous one). Returns false
// for another Transport.
bool SimResetClock(Transport& t, double now);

// Marks `rank` dead, as KillLoopbackRank does.
void KillSimRank(Transport& any_rank_of_world, int rank);

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_SIM_TRANSPORT_H_
