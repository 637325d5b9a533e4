// Balanced SparDL blocks: contiguous block boundaries that give every block
// an equal share of the gradient's largest entries, so that SparDL's equal
// per-block quotas (k/P each) select what a global top-k would. With the
// paper's equal-size blocks, a block that holds small, hot layers (the
// output layers of a bucket laid out last-layer-first) gets the same quota
// as one of a large, cold layer; measured on the Fashion-MNIST MLP, the
// equal blocks train measurably slower (docs/measurements.md).
//
// The boundaries are a pure function of a call's result, which every rank
// holds bit for bit (invariant 1), so the ranks agree without a message.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_BALANCE_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_BALANCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/sparse.h"

namespace gradex::collectives::algorithms {

// Balancing is off above this density: a block must stay at least
// kMinBlockPerKeep times its quota, so that its frames stay sparse (the
// volume model's encoding) and its selection is a selection.
inline constexpr double kMaxBalancedDensity = 0.1;
inline constexpr size_t kMinBlockPerKeep = 4;

// New boundaries (parts + 1 values, 0 .. n) from a call's result, sorted by
// index, that ran with `bounds` and per-block quotas `keeps`:
//  - theta, the strictest block's threshold: the largest over the blocks
//    that kept their full quota of the smallest magnitude they kept;
//  - the result's entries of magnitude >= theta stand for the global top
//    set (every block contributes what clears one common threshold);
//  - the inner boundaries are that set's index quantiles, then moved as
//    little as needed for block b to span >= kMinBlockPerKeep * keeps[b].
// Returns `bounds` unchanged when the result cannot say more (fewer than
// `parts` entries clear theta, or no block kept its full quota), or when
// the sizes cannot be met.
std::vector<size_t> BalancedBounds(const kernels::SparseVec& result,
                                   const std::vector<size_t>& bounds,
                                   const std::vector<size_t>& keeps);

}  // namespace gradex::collectives::algorithms

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_SPARDL_BALANCE_H_
