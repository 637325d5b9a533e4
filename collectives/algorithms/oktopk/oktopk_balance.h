// Ok-Topk's second phase (paper §3.1.2): data balancing, when the largest
// selected buffer is over 4x the mean, into P equal contiguous slices of the
// concatenated selection, then the all-gatherv (Bruck) of the selected values
// together with each region's cancelled indices.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_BALANCE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_BALANCE_H_

#include <vector>

#include "absl/status/status.h"
#include "collectives/algorithms/oktopk/oktopk_exchange.h"
#include "collectives/algorithms/oktopk/oktopk_regions.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms::oktopk {

// Whether the buffers of `counts` are balanced first (max > 4 * mean).
bool NeedsBalancing(const std::vector<uint32_t>& counts);

// `selected` is this rank's global selection (region `rank`), `counts` every
// rank's selected count, `cancelled` this region's indices whose sum is exactly
// zero and `zero_counts` every region's count of them. On return `result` is
// the whole selection (sorted COO, identical on every rank) and `all_cancelled`
// every region's cancelled indices (values 1). Every received block is checked
// to hold exactly the count the buffer sizes announced.
absl::Status BalanceAndAllGather(Link& link, const Boundaries& bounds,
                                 const std::vector<uint32_t>& counts,
                                 const std::vector<uint32_t>& zero_counts,
                                 kernels::SparseVec selected, kernels::SparseVec cancelled,
                                 PhaseTimes* times, WireCount* wire, kernels::SparseVec* result,
                                 kernels::SparseVec* all_cancelled, bool* balanced);

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_BALANCE_H_
