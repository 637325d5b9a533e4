#include "collectives/local_input.h"

#include "collectives/call_frame.h"
#include "collectives/phase_timer.h"
#include "collectives/sparse_allreduce.h"

namespace gradex {

std::span<float> LocalInput::Accumulated() {
  if (!accumulated_) {
    PhaseTimer t(&times_->reduction_s);
    nonfinite_ = AccumulateIntoResidual(grad_, acc_, velocity_, pending_.momentum);
    accumulated_ = true;
  }
  return acc_;
}

}  // namespace gradex
