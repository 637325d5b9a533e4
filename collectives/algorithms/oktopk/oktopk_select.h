// Ok-Topk's two selections (paper §3.1.3): the local top-k of gradient +
// residual, and the global top-k of the reduced regions, each by a reused
// threshold with an exact refresh every τ' calls. With the tracking rule a
// count outside [BandLow(k), BandHigh(k)] is redone exactly, so what is
// selected stays within that band (or is every nonzero when fewer exist).
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_SELECT_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_SELECT_H_

#include <span>
#include <vector>

#include "absl/status/status.h"
#include "collectives/algorithms/oktopk/oktopk_exchange.h"
#include "collectives/algorithms/oktopk/oktopk_threshold.h"
#include "collectives/local_input.h"
#include "kernels/sparse.h"

namespace gradex::collectives::algorithms::oktopk {

struct SelectInfo {
  bool exact = false;      // the selection was exact (refresh or fallback)
  bool fell_back = false;  // the reused threshold's count left the band
  size_t reuse_count = 0;  // entries at or above the reused threshold
  // The magnitude selected at (|x| >= threshold): the reused threshold when
  // its count was accepted, else the exact k-th largest; 0 when every
  // non-zero was kept (k >= n, or fewer non-zeros than k).
  float threshold = 0;
};

// Local top-k of gradient + residual (`in`, accumulated here: fused into the
// selection's pass where the kernels can) into `out` (sorted COO); the
// values stay in the residual (the caller takes them out). `keep_all`
// (k >= n): every nonzero. NaN is never selected.
void SelectLocal(LocalInput& in, size_t k, bool keep_all, bool exact_due, ThresholdController& ctl,
                 kernels::SparseVec* out, SelectInfo* info);

// The global selection over the ranks' reduced regions (disjoint, ascending by
// rank). `reduced` holds this rank's nonzero reduced sums; `zeros` how many
// sums cancelled to exactly zero (their count travels with the buffer sizes).
// Every rank learns every rank's selected count (`counts`) and cancelled
// count (`zero_counts`). Exact selection: a distributed radix select over
// magnitude keys (three histogram all-gathers), ties to the lower index, so
// exactly min(k, nonzeros) are selected.
absl::Status SelectGlobal(Link& link, const kernels::SparseVec& reduced, uint32_t zeros, size_t k,
                          bool keep_all, bool exact_due, ThresholdController& ctl,
                          PhaseTimes* times, WireCount* wire, kernels::SparseVec* selected,
                          std::vector<uint32_t>* counts, std::vector<uint32_t>* zero_counts,
                          SelectInfo* info);

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_SELECT_H_
