// What an algorithm's local part (SparseAllreduce::LocalSelection) works on:
// the residual and, until something adds it, this call's gradient. The call
// frame leaves the accumulation `residual += grad` to the local part so that
// a selection kernel can do it inside its own first pass over the residual
// (kernels::SelectTopKStep): one O(n) read and write less per call. A local
// part that selects some other way asks for Accumulated() first.
#ifndef GRADEX_COLLECTIVES_LOCAL_INPUT_H_
#define GRADEX_COLLECTIVES_LOCAL_INPUT_H_

#include <cstddef>
#include <span>

#include "absl/status/status.h"
#include "collectives/residual_memory.h"
#include "kernels/topk_step.h"

namespace gradex::collectives {

struct PhaseTimes;

class LocalInput {
 public:
  // `times` gets the unfused accumulation as reduction. `velocity` (may be
  // empty) and `momentum`: DGC's momentum correction, velocity = velocity *
  // momentum + grad, then acc += velocity. A frame that adds the gradient
  // itself (COVAP's decaying one) reports it with Fused().
  // `memory` (may be null: host memory) holds grad, acc and velocity; a
  // local part then works through it (memory()) and never reads them.
  LocalInput(std::span<const float> grad, std::span<float> acc, PhaseTimes* times,
             std::span<float> velocity = {}, float momentum = 0, ResidualMemory* memory = nullptr)
      : grad_(grad), acc_(acc), velocity_(velocity), times_(times), memory_(memory) {
    pending_.grad = grad.data();
    pending_.velocity = velocity.empty() ? nullptr : velocity.data();
    pending_.momentum = momentum;
  }

  size_t size() const { return acc_.size(); }
  // Non-finite entries of acc right after the accumulation (the call frame's
  // residual rule); 0 until accumulated.
  size_t nonfinite() const { return nonfinite_; }

  // grad + residual: accumulated now (one counting pass) if nothing has yet.
  std::span<float> Accumulated();

  // Where the spans live (null: host memory), and the first error an
  // operation there met (the call fails with it).
  ResidualMemory* memory() const { return memory_; }
  const absl::Status& status() const { return status_; }
  void Failed(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  // For a kernel that fuses the accumulation into its first pass: the span to
  // work on and what to add into it first (null once added). The kernel
  // must add it and count the non-finite entries it leaves, then call
  // Fused() with that count.
  std::span<float> target() const { return acc_; }
  const kernels::Accumulate* pending() const { return accumulated_ ? nullptr : &pending_; }
  void Fused(size_t nonfinite) {
    if (accumulated_) return;
    accumulated_ = true;
    nonfinite_ = nonfinite;
  }

 private:
  std::span<const float> grad_;
  std::span<float> acc_;
  std::span<float> velocity_;
  bool accumulated_ = false;
  PhaseTimes* times_;
  kernels::Accumulate pending_;
  size_t nonfinite_ = 0;
  ResidualMemory* memory_;
  absl::Status status_;
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_LOCAL_INPUT_H_
