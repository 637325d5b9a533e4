// A whole step over an Agent through a bucket pipeline of its own
// (whole_step.h).
#include "pipeline/whole_step.h"

#include <algorithm>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::pipeline {

WholeStep::WholeStep(Agent* agent) : agent_(agent) {}

// The pipeline stops (its threads joined) before the agent it drives can go.
WholeStep::~WholeStep() = default;

absl::Status WholeStep::Run(std::span<const std::span<const float>> grads, StepOutcome* out) {
  const size_t buckets = static_cast<size_t>(std::max(agent_->options_.buckets, 1));
  if (grads.size() != buckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: ", grads.size(), " buckets given, ", buckets, " configured"));
  }
  for (const auto& g : grads) {
    if (g.size() != agent_->options_.elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step: a bucket of ", g.size(), " elements, expected ", agent_->options_.elements));
    }
  }
  // A step that cannot begin takes no gradient: the caller runs it again.
  if (absl::Status s = agent_->BeginStep(); !s.ok()) return agent_->EndStep(out);
  if (pipeline_ == nullptr) {
    // One bucket after another (no overlap), sums, every value exchanged as
    // given: what gradex-agent's synthetic steps and bench measure.
    PipelineOptions p;
    p.mean = false;
    p.pipeline = false;
    p.max_bucket_elements = std::max<size_t>(agent_->options_.elements, 1);
    pipeline_ = std::make_unique<BucketPipeline>(agent_, p);
  }
  std::vector<std::future<BucketEnd>> ends;
  for (size_t b = 0; b < grads.size(); ++b) {
    ends.push_back(
        pipeline_->Submit({{b, agent_->options_.elements}}, grads[b], b + 1 == grads.size()));
  }
  out->results.resize(grads.size());
  out->stats.assign(grads.size(), collectives::CallStats{});
  absl::Status status = absl::InternalError("step: its last bucket did not end the step");
  // Each bucket's wait is bounded by its exchange's deadline (a failed step
  // keeps the later buckets without exchanging them).
  for (size_t b = 0; b < ends.size(); ++b) {
    BucketEnd e = ends[b].get();
    if (e.step_status) {
      status = *e.step_status;
      std::vector<collectives::AllreduceResult> results = std::move(out->results);
      std::vector<collectives::CallStats> stats = std::move(out->stats);
      *out = std::move(e.step_outcome);
      out->results = std::move(results);
      out->stats = std::move(stats);
    }
    out->results[b] = std::move(e.outcome.result);
    out->stats[b] = std::move(e.outcome.stats);
  }
  return status;
}

std::vector<std::vector<float>> WholeStep::residuals() const {
  const size_t buckets = static_cast<size_t>(std::max(agent_->options_.buckets, 1));
  std::vector<std::vector<float>> out(buckets, std::vector<float>(agent_->options_.elements, 0.0f));
  absl::StatusOr<SpanState> s =
      pipeline_ != nullptr ? pipeline_->Export() : absl::StatusOr<SpanState>(SpanState{});
  if (!s.ok()) return {};
  for (auto& [key, r] : s->residuals) {
    if (key < buckets) out[key] = std::move(r);
  }
  return out;
}

}  // namespace gradex::pipeline
