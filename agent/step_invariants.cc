#include "agent/step_invariants.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"
#include "collectives/invariants.h"

namespace gradex::agent {
namespace {

// Float sums in a different order (the algorithm's vs dense-ring's) differ by
// rounding only; the agent tests use the same bound.
constexpr double kRelativeTolerance = 1e-5;

// The conservation check's dense-ring runs under a call id far from every
// neighbouring collective call (tags carry the low 24 bits of the call id:
// 2^23 is 128 steps away), so its messages never match a neighbouring step's.
constexpr uint64_t kCheckStepOffset = uint64_t{1} << 23;

}  // namespace

StepInvariants::StepInvariants(const std::string& job, int buckets, size_t elements,
                               uint64_t corrupt_step)
    : job_id_(pipeline::JobId(job)),
      corrupt_step_(corrupt_step),
      residual_in_(buckets, std::vector<float>(elements)),
      result_dense_(elements),
      contribution_(elements),
      scratch_(elements) {}

void StepInvariants::Before(const pipeline::WholeStep& step) {
  if (std::vector<std::vector<float>> r = step.residuals(); r.size() == residual_in_.size()) {
    residual_in_ = std::move(r);
  }
}

absl::Status StepInvariants::After(const pipeline::WholeStep& step,
                                   std::span<const std::span<const float>> grads,
                                   const pipeline::StepOutcome& out, std::string* violation) {
  const pipeline::Agent& agent = step.agent();
  transport::Transport* t = agent.tracked_transport();  // preempted by an eviction like the step
  const member::Plan* plan = agent.plan();
  if (t == nullptr || plan == nullptr) {
    return absl::FailedPreconditionError("invariants: no communicator after a completed step");
  }
  if (in_band_ == nullptr || in_band_for_ != t || in_band_epoch_ != out.epoch) {
    in_band_ = std::make_unique<collectives::InBand>(*t);
    in_band_for_ = t;
    in_band_epoch_ = out.epoch;
  }
  const transport::Deadline deadline = transport::DeadlineIn(plan->step_deadline);
  const size_t buckets = grads.size();
  const std::vector<std::vector<float>> residual_out = step.residuals();
  if (residual_out.size() != buckets) {
    return absl::FailedPreconditionError("invariants: the step's residuals are not readable");
  }
  uint64_t hash = catalog::kFnv1aOffsetBasis;
  std::string bad;
  for (size_t b = 0; b < buckets; ++b) {
    const collectives::AllreduceResult& r = out.results[b];
    r.ToDense(result_dense_);
    if (out.step == corrupt_step_ && b == 0) result_dense_[0] += 1.0f;
    const uint64_t entries = r.is_dense ? r.CountNonZeros() : r.sparse.nnz();
    if (entries > out.stats[b].result_capacity && bad.empty()) {
      bad = absl::StrCat("bounds: bucket ", b, " has ", entries, " entries, capacity ",
                         out.stats[b].result_capacity);
    }
    hash = catalog::Fnv1aMix(hash, collectives::HashFloats(result_dense_));

    collectives::CallContext ctx;
    ctx.transport = t;
    ctx.job_id = job_id_;
    ctx.epoch = out.epoch;
    ctx.call_id = pipeline::CallId(out.step, static_cast<uint32_t>(b)) + kCheckStepOffset;
    ctx.training_step = out.step;
    ctx.deadline = deadline;
    auto cons = collectives::CheckConservation(ctx, grads[b], residual_in_[b], residual_out[b],
                                               result_dense_, contribution_, scratch_,
                                               out.results[b].decayed);
    if (!cons.ok()) return cons.status();
    const double limit = kRelativeTolerance * std::max(cons->scale(), 1e-30);
    if (!(cons->max_abs_err <= limit) && bad.empty()) {  // NaN-safe
      bad = absl::StrCat(
          "conservation: bucket ", b, " max |dense-ring sum - result| = ", cons->max_abs_err, " > ",
          limit, " (max |sum| ", cons->max_abs_sum, ", max |term| ", cons->max_abs_term, ")");
    }
  }
  auto consistent = collectives::CheckConsistency(*in_band_, hash, deadline);
  if (!consistent.ok()) return consistent.status();
  if (!*consistent && bad.empty()) bad = "consistency: the result differs between ranks";
  if (!bad.empty()) {
    *violation = absl::StrCat("step ", out.step, " epoch ", out.epoch, " rank ", out.rank, " of ",
                              out.world, " (", out.algorithm, "): ", bad);
  }
  return absl::OkStatus();
}

}  // namespace gradex::agent
