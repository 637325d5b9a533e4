// oktopk: Ok-Topk's O(k) sparse allreduce (Li & Hoefler, PPoPP'22) with the
// residual rule of its Algorithm 2. See docs/architecture.md, "Ok-Topk".
#ifndef GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_H_
#define GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_H_

#include <memory>

#include "collectives/algorithms/oktopk/oktopk_regions.h"
#include "collectives/algorithms/oktopk/oktopk_select.h"
#include "collectives/algorithms/oktopk/oktopk_threshold.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives::algorithms::oktopk {

struct OkTopkConfig {
  // kAuthors reproduces the authors' threshold nudging (for comparisons only:
  // its counts are unbounded, so result_capacity is n).
  ThresholdRule rule = ThresholdRule::kTracking;
  // Who agrees on region boundaries; null: MeanBoundaryAgreement in the call.
  std::unique_ptr<BoundaryAgreement> agreement;
};

// What the last call of an oktopk instance did (tests, benchmarks, metrics).
struct OkTopkCallInfo {
  SelectInfo local, global;
  bool agreed = false;    // region boundaries were (re-)agreed
  bool balanced = false;  // data balancing ran before the all-gatherv
};
// Null when `algorithm` is not an oktopk instance.
const OkTopkCallInfo* OkTopkLastCall(const SparseAllreduce& algorithm);

std::unique_ptr<SparseAllreduce> CreateOkTopk();
std::unique_ptr<SparseAllreduce> CreateOkTopk(OkTopkConfig config);

}  // namespace gradex::collectives::algorithms::oktopk

#endif  // GRADEX_COLLECTIVES_ALGORITHMS_OKTOPK_OKTOPK_H_
