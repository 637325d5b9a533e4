// Ok-Topk's regions: the index space cut into P contiguous regions whose
// boundaries balance the local top-k coordinates (paper §3.1.1). Each rank
// proposes boundaries at the quantiles of its local selection's indices; the
// agreed boundaries are the mean over ranks, re-agreed every τ calls.
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_REGIONS_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_REGIONS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/algorithms/oktopk/oktopk_exchange.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms::oktopk {

// Region boundaries b_0 = 0 <= b_1 <= ... <= b_P = n; region j = [b_j, b_j+1).
using Boundaries = std::vector<uint32_t>;

// Equal contiguous regions (before any agreement, and for empty selections).
Boundaries EqualBoundaries(size_t n, int parts);

// This rank's proposal: the P-1 inner boundaries at the quantiles
// j * |local| / P of its local selection's (sorted) indices.
std::vector<uint32_t> ProposeBoundaries(const kernels::SparseVec& local, size_t n, int parts);

// Splits a sorted selection by region: (*parts)[j] gets the entries of region j.
void SplitByRegions(const kernels::SparseVec& sel, const Boundaries& b,
                    std::vector<kernels::SparseVec>* parts);

inline wire::BlockRange Region(const Boundaries& b, int j) { return {b[j], b[j + 1]}; }

// Turns every rank's proposal into the same boundaries. The data plane does it
// with an all-gather inside the call; the coordinator can take it over (it
// collects proposals asynchronously and publishes boundaries with the plan).
class BoundaryAgreement {
 public:
  virtual ~BoundaryAgreement() = default;
  // `proposal` holds this rank's P-1 inner boundaries; returns the agreed P+1.
  virtual absl::StatusOr<Boundaries> Agree(Link& link, std::span<const uint32_t> proposal, size_t n,
                                           PhaseTimes* times, WireCount* wire) = 0;
};

// The mean of the proposals over ranks (rounded down), via AllGatherWords.
// Proposals are checked: nondecreasing and at most n.
class MeanBoundaryAgreement final : public BoundaryAgreement {
 public:
  absl::StatusOr<Boundaries> Agree(Link& link, std::span<const uint32_t> proposal, size_t n,
                                   PhaseTimes* times, WireCount* wire) override;
};

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_REGIONS_H_
