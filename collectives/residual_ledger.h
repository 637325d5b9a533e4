// Residual bookkeeping of one call (SparDL's global residual collection):
// every value discarded by this rank is owed to its residual, but is only
// added when the call succeeds, so that a failed call can put back the rank's
// whole contribution instead (nothing lost, nothing counted twice).
#ifndef GRADEX_COLLECTIVES_RESIDUAL_LEDGER_H_
#define GRADEX_COLLECTIVES_RESIDUAL_LEDGER_H_

#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collectives/residual_memory.h"
#include "kernels/sparse.h"

namespace gradex::collectives {

class ResidualLedger {
 public:
  // `acc` is the residual span, which the caller has set to grad + residual;
  // `memory` (may be null: host memory) holds it.
  explicit ResidualLedger(std::span<float> acc, ResidualMemory* memory = nullptr)
      : acc_(acc), memory_(memory) {}

  // Records (a copy of) values this rank selected out of acc and zeroed there.
  void Selected(const kernels::SparseVec& s) { selected_.push_back(s); }
  // Records values discarded later in the call, owed at `scale` (1/holders).
  void Discarded(kernels::SparseVec d, float scale) {
    if (d.nnz() > 0) discarded_.emplace_back(std::move(d), scale);
  }
  // SparDL's end-procedure residuals sent home: of the discards, keeps those
  // at an index `result` delivers (in-procedure ones: the contributors of a
  // delivered index cannot tell their part was cut), and owes back to this
  // rank every value it selected at an index `result` does not deliver, so
  // each contributor keeps its own part there, as in Ok-Topk's Algorithm 2,
  // instead of the rank that cut the sum keeping everyone's. The result must
  // hold a sum that cancelled (as -0, kernels::MergeAddKeepCancelled): else
  // its parts would return home at every call and never drain. Before Commit.
  void SendHomeUndelivered(const kernels::SparseVec& result);
  // The call succeeded: add every discard to the residual. Fails only on a
  // residual in memory that failed the scatter.
  absl::Status Commit();
  // The call failed: put the selected values back (acc = grad + old residual).
  absl::Status Restore();

 private:
  std::span<float> acc_;
  ResidualMemory* memory_;
  std::vector<kernels::SparseVec> selected_;
  std::vector<std::pair<kernels::SparseVec, float>> discarded_;
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_RESIDUAL_LEDGER_H_
