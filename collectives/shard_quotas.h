// Balanced node shards: how many entries each node shard of the hierarchical
// exchange keeps. The node's ring reduce-scatter cuts a bucket into L equal
// shards, and with equal quotas the shard holding a DDP bucket's small, hot
// output layers keeps as few entries as one of a large, cold layer: the
// equal-blocks problem SparDL's balanced blocks solve inside the algorithm
// (spardl_balance.h), one level up. So the quotas move instead (the shards
// stay equal: the ring's blocks and the inner algorithm's sizes do not
// change), towards each shard's share of the result's largest entries.
//
// A pure function of a call's result, which every rank holds bit for bit
// (invariant 1), so the ranks agree without a message; a rank whose quotas
// ever differed would fail the next call's frame checks, not sum wrongly.
#ifndef GRADEX_COLLECTIVES_SHARD_QUOTAS_H_
#define GRADEX_COLLECTIVES_SHARD_QUOTAS_H_

#include <cstddef>
#include <span>
#include <vector>

#include "kernels/sparse.h"

namespace gradex {

// Training steps between re-balancings (a call at step s re-balances for the
// calls after it when (s + 1) % period == 0).
inline constexpr uint64_t kShardQuotaPeriod = 64;

// New quotas from the result of a call that kept quotas[l] entries on shard
// l (by_shard[l]: the result's entries on shard l, zeros dropped; sizes[l]:
// the shard's elements):
//  - theta, the magnitude of the result's (total quota / L)-th largest
//    entry: what one shard's quota would take were it drawn from the whole
//    result (a shard's own threshold would not do: an inner algorithm with
//    blocks of its own, SparDL's, fills its quota with cold entries too);
//  - count_l, shard l's entries of magnitude >= theta, stand for its share
//    of the global top set;
//  - the total quota is shared in proportion to count_l, each shard kept
//    between a quarter of the mean quota and a quarter of its size (its
//    selection stays a selection and its frames sparse).
// Returns `quotas` unchanged when the result cannot say more (fewer than
// one entry a shard clears theta). Re-balancing from a result that already
// ran on balanced quotas moves them further: repeated, they approach each
// shard's share of a global top-k.
std::vector<size_t> BalancedShardQuotas(std::span<const kernels::SparseVec> by_shard,
                                        std::span<const size_t> quotas,
                                        std::span<const size_t> sizes);

}  // namespace gradex

#endif  // GRADEX_COLLECTIVES_SHARD_QUOTAS_H_
