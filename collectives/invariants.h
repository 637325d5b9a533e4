// Invariant checks of one call (docs/design.md "Invariants"), run in-band on every
// rank: consistency (result hash all-gathered), conservation (the catalog's
// reference sum, catalog::ReferenceSumAlgorithm(), over each rank's
// contribution), bounds (non-zeros within capacity).
#ifndef GRADEX_COLLECTIVES_INVARIANTS_H_
#define GRADEX_COLLECTIVES_INVARIANTS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "collectives/in_band.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives {

// Hash of a dense float vector's bits (equal iff bitwise equal, modulo
// collisions).
uint64_t HashFloats(std::span<const float> x);

struct ConservationResult {
  double max_abs_err = 0;  // max |reference sum - result|
  double max_abs_sum = 0;  // max |reference sum|
  // max |grad| + |residual_in| + |residual_out| (+ |decayed|) on this rank:
  // the size of the terms whose float sums round, so where nearly everything
  // stays in the residuals (a COVAP step that sends nothing) the tolerance is
  // not taken relative to a sum that is itself only rounding.
  double max_abs_term = 0;
  double scale() const { return max_abs_sum > max_abs_term ? max_abs_sum : max_abs_term; }
};

// contribution = grad + residual_in - residual_out is what this rank gave up
// this call, less `decayed` (AllreduceResult::decayed: what error feedback's
// coefficient removed, COVAP's; empty when nothing decays); the sum of every
// rank's contribution (computed with the catalog's reference sum) must equal
// `result_dense`. `contribution` and `scratch` are n-element scratch; they
// may alias `grad` and `residual_in` (both are read only before either is
// written).
absl::StatusOr<ConservationResult> CheckConservation(
    const CallContext& ctx, std::span<const float> grad, std::span<const float> residual_in,
    std::span<const float> residual_out, std::span<const float> result_dense,
    std::span<float> contribution, std::span<float> scratch, std::span<const float> decayed = {});

// Consistency: true on every rank iff every rank's hash equals every other's.
absl::StatusOr<bool> CheckConsistency(InBand& in_band, uint64_t hash, transport::Deadline deadline);

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_INVARIANTS_H_
