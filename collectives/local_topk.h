// The local top-k the top-k algorithms share (SparDL's per-block selection,
// TopkA, gTopk, SparCML): the accumulation fused into the selection's first
// pass when the call frame left it, and the last call's threshold reused.
// Either way the selection is bit for bit SelectTopKAndZero's / BlockTopK's
// (kernels/topk_step.h); only the passes over the bucket differ.
#ifndef GRADEX_COLLECTIVES_LOCAL_TOPK_H_
#define GRADEX_COLLECTIVES_LOCAL_TOPK_H_

#include <vector>

#include "collectives/local_input.h"
#include "collectives/residual_ledger.h"
#include "collectives/sparse_allreduce.h"
#include "kernels/topk_step.h"

namespace gradex::collectives {

// One per algorithm object, which lives as long as its bucket (the agent's
// bucket slots): the reuse state is the bucket's threshold history.
class LocalTopK {
 public:
  // The top-k of acc into *out (cleared), zeroed in acc and recorded in the
  // ledger.
  void Select(LocalInput& in, size_t k, bool reuse, ResidualLedger& ledger, CallStats* stats,
              kernels::SparseVec* out);
  // Per block: block b = acc[bounds[b], bounds[b+1]) keeps keeps[b] entries
  // into (*out)[b]. The blocks cover acc (bounds from 0 to its size).
  void SelectBlocks(LocalInput& in, const std::vector<size_t>& bounds,
                    const std::vector<size_t>& keeps, bool reuse, ResidualLedger& ledger,
                    CallStats* stats, std::vector<kernels::SparseVec>* out);

  // Totals over this object's calls (tests, metrics read the call's details).
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  // Adds this call's hits and misses ("topk_reuse_hits", "topk_reuse_misses",
  // and the candidates of the last try) to the call's details.
  void Report(uint64_t hits_before, uint64_t misses_before, CallStats* stats) const;

  std::vector<kernels::ThresholdReuse> reuse_;  // one per block; Select uses [0]
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_LOCAL_TOPK_H_
