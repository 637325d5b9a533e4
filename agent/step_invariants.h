// In-band invariant checks of every agent step (docs/design.md "Invariants"), for
// gradex-agent --check-invariants: consistency (one hash of every bucket's
// result all-gathered over the epoch's transport), conservation (dense-ring
// over grad + residual_in - residual_out must equal the result) and bounds
// (entries within the result capacity the algorithm promised). The checks
// themselves are the collectives' (collectives/invariants.h), shared with the
// benchmark.
#ifndef GRADEX_AGENT_STEP_INVARIANTS_H_
#define GRADEX_AGENT_STEP_INVARIANTS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/in_band.h"
#include "pipeline/whole_step.h"

namespace gradex::agent {

class StepInvariants {
 public:
  // corrupt_step (testing only): this rank's result of that step is altered
  // before the checks, which must then report a violation.
  StepInvariants(const std::string& job, int buckets, size_t elements,
                 uint64_t corrupt_step = ~uint64_t{0});

  // Copies the residuals the coming step starts from.
  void Before(const pipeline::WholeStep& step);

  // Checks the step just completed. A violation sets *violation (and returns
  // OK): the run must stop. A non-OK status means the check itself could not
  // finish (a peer failed or missed the deadline): the caller aborts the
  // communicator so the next step re-joins, like a failed step.
  absl::Status After(const pipeline::WholeStep& step, std::span<const std::span<const float>> grads,
                     const pipeline::StepOutcome& out, std::string* violation);

 private:
  const uint64_t job_id_;
  const uint64_t corrupt_step_;
  std::vector<std::vector<float>> residual_in_;
  std::vector<float> result_dense_, contribution_, scratch_;
  std::unique_ptr<collectives::InBand> in_band_;  // one per communicator (its seq restarts)
  transport::Transport* in_band_for_ = nullptr;
  uint32_t in_band_epoch_ = 0;
};

}  // namespace gradex::agent

#endif  // GRADEX_AGENT_STEP_INVARIANTS_H_
