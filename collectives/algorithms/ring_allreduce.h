// The dense ring allreduce (reduce-scatter then all-gather, P-1 steps each) as
// a schedule any algorithm can run over its own Link: dense-ring is this over
// the whole gradient, COVAP over the elements of the parts it sends.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_RING_ALLREDUCE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_RING_ALLREDUCE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/link.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms {

// Reduces `data` (n elements) in place to the sum over the link's ranks,
// bitwise the same on every rank. Phases 1 and 2 of the link's algorithm.
absl::Status RingAllreduce(Link& link, float* data, size_t n, PhaseTimes* times);

// The reduce-scatter half alone, under `phase`: after P-1 steps this rank's
// block (rank + 1) % P of the P equal blocks of n holds the sum over the
// link's ranks (the rest of `data` holds partial sums). Returns that block.
absl::StatusOr<int> RingReduceScatter(Link& link, float* data, size_t n, uint16_t phase,
                                      PhaseTimes* times);
// The bytes `rank` of `world` sends and receives in RingReduceScatter.
Volume RingReduceScatterVolume(int rank, int world, size_t n);

// The bytes `rank` of `world` sends and receives in RingAllreduce of n
// elements: 2(P-1) dense frames of one block each, headers included.
Volume RingAllreduceVolume(int rank, int world, size_t n);

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_RING_ALLREDUCE_H_
