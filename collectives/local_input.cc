#include "collectives/local_input.h"

#include "collectives/call_frame.h"
#include "collectives/phase_timer.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::collectives {

std::span<float> LocalInput::Accumulated() {
  if (!accumulated_) {
    PhaseTimer t(&times_->reduction_s);
    accumulated_ = true;
    if (memory_ == nullptr) {
      nonfinite_ = AccumulateIntoResidual(grad_, acc_, velocity_, pending_.momentum);
    } else if (absl::StatusOr<size_t> n =
                   memory_->Accumulate(grad_, acc_, velocity_, pending_.momentum);
               n.ok()) {
      nonfinite_ = *n;
    } else {
      Failed(n.status());
    }
  }
  return acc_;
}

}  // namespace gradex::collectives
