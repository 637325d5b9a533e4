// A whole step over an Agent: its buckets one after another through a
// BucketPipeline of its own (no overlap, sums, every value exchanged as
// given). What gradex-agent's synthetic gradients, its --check-invariants,
// the benchmarks and the agent's tests run; a trainer's client drives the
// pipeline itself. It stands above both, so the Agent includes nothing of
// the pipeline that drives it.
#ifndef GRADEX_PIPELINE_WHOLE_STEP_H_
#define GRADEX_PIPELINE_WHOLE_STEP_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "pipeline/agent.h"
#include "pipeline/bucket_pipeline.h"

namespace gradex::pipeline {

class WholeStep {
 public:
  // `agent` outlives this; AgentOptions::buckets and ::elements give the
  // step's shape.
  explicit WholeStep(Agent* agent);
  ~WholeStep();
  WholeStep(const WholeStep&) = delete;
  WholeStep& operator=(const WholeStep&) = delete;

  // One step: the SUM over ranks of every bucket's sparsified gradient.
  // grads[b] holds `elements` values. A step that cannot begin takes no
  // gradient (the caller runs it again); on another error the residuals
  // hold every gradient given so far, and the next call re-joins.
  absl::Status Run(std::span<const std::span<const float>> grads, StepOutcome* out);

  // The buckets' residuals in bucket order (a copy, read between steps).
  std::vector<std::vector<float>> residuals() const;

  Agent& agent() const { return *agent_; }

 private:
  Agent* const agent_;
  // Made at the first step.
  std::unique_ptr<BucketPipeline> pipeline_;
};

}  // namespace gradex::pipeline

#endif  // GRADEX_PIPELINE_WHOLE_STEP_H_
