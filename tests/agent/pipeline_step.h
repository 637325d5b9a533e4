// One step of host buckets through a bucket pipeline (each bucket k a span
// keyed k), for the agent tests that drive a step and read what it ran.
#ifndef GRADEX_TESTS_AGENT_PIPELINE_STEP_H_
#define GRADEX_TESTS_AGENT_PIPELINE_STEP_H_

#include <chrono>
#include <future>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "pipeline/bucket_pipeline.h"

namespace gradex::testing {

// Sums, one bucket after another, every value exchanged as given.
inline std::unique_ptr<pipeline::BucketPipeline> SequentialPipeline(pipeline::Agent* agent) {
  pipeline::PipelineOptions p;
  p.mean = false;
  p.pipeline = false;
  p.timeout = std::chrono::milliseconds(30000);
  return std::make_unique<pipeline::BucketPipeline>(agent, p);
}

struct PipelineStep {
  std::vector<pipeline::BucketEnd> buckets;
  absl::Status end = absl::InternalError("the step's last bucket did not end it");
  pipeline::StepOutcome out;
};

inline PipelineStep RunPipelineStep(pipeline::BucketPipeline& pipeline,
                                    const std::vector<std::vector<float>>& grads) {
  std::vector<std::future<pipeline::BucketEnd>> ends;
  for (size_t k = 0; k < grads.size(); ++k) {
    ends.push_back(pipeline.Submit({{k, grads[k].size()}}, std::span<const float>(grads[k]),
                                   k + 1 == grads.size()));
  }
  PipelineStep r;
  for (auto& f : ends) {
    r.buckets.push_back(f.get());
    if (r.buckets.back().step_status) {
      r.end = *r.buckets.back().step_status;
      r.out = r.buckets.back().step_outcome;
    }
  }
  return r;
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_AGENT_PIPELINE_STEP_H_
