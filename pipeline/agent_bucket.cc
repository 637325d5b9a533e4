// One bucket of the open step (agent.h) in three parts, PlanBucket /
// PrepareBucket / ExchangeBucket, that the bucket pipeline runs on two
// threads (selection of bucket b+1 while bucket b exchanges).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/hierarchical.h"
#include "collectives/call_frame.h"
#include "kernels/sparse.h"
#include "pipeline/agent.h"

namespace gradex::pipeline {
namespace {

double Seconds(transport::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::Status NonFiniteResidual(uint32_t bucket, const collectives::CallStats& stats) {
  const double bad = stats.Detail("residual_nonfinite");
  if (bad <= 0) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      "bucket ", bucket, ": its residual held ", static_cast<uint64_t>(bad),
      " NaN or infinite entries (first: element ",
      static_cast<uint64_t>(stats.Detail("residual_nonfinite_first")),
      "); they were reset to 0 and exchanged as 0 (gradex_agent_residual_nonfinite_total)"));
}

double ResidualL2(std::span<const float> residual) {
  return std::sqrt(kernels::SumOfSquares(residual.data(), residual.size()));
}

double CallResidualL2(const BucketCall& call) {
  // A refused call may have no residual span: the slot's is the one.
  if (call.memory == nullptr) return ResidualL2(call.slot->residual);
  absl::StatusOr<double> sq = call.memory->SumOfSquares(call.residual);
  return sq.ok() ? std::sqrt(*sq) : std::nan("");
}

absl::StatusOr<collectives::SparseAllreduce*> Agent::SlotAlgorithm(
    const std::string& name, uint32_t epoch, BucketSlot* slot, const catalog::NodeLayout* layout) {
  if (slot->epoch != epoch) {
    slot->algorithm.reset();
    slot->dense.reset();
    slot->epoch = epoch;
  }
  // The dense fallback has an object of its own, so a probe or a small
  // bucket's dense run leaves the sparse algorithm's state alone.
  std::unique_ptr<collectives::SparseAllreduce>& held =
      name == member::DenseAlgorithm() ? slot->dense : slot->algorithm;
  if (held == nullptr || held->name() != name) {
    absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> a =
        collectives::CreateAllreduce(name);
    if (!a.ok()) return a.status();
    if (layout != nullptr && collectives::algorithms::FlatReason(name, *layout).empty()) {
      absl::StatusOr<std::unique_ptr<collectives::algorithms::HierarchicalAllreduce>> h =
          collectives::algorithms::HierarchicalAllreduce::Create(*std::move(a), *layout);
      if (!h.ok()) return h.status();
      a = std::unique_ptr<collectives::SparseAllreduce>(*std::move(h));
    }
    held = *std::move(a);
  }
  return held.get();
}

absl::Status Agent::KeepCall(BucketCall* call) const {
  // A fresh call's gradient joins its residual, a prepared one's comes back
  // (grad + old residual again); a kept or done one holds already.
  if (call->state == BucketCall::State::kFresh || call->state == BucketCall::State::kPrepared) {
    AbandonBucket(call);
  }
  return absl::Status(
      step_status_.code(),
      absl::StrCat("step ", next_step_, " bucket ", call->bucket,
                   " not exchanged (kept in its residual) after: ", step_status_.message()));
}

void Agent::PlanBucket(uint32_t bucket, std::span<const size_t> step_buckets,
                       std::span<const float> grad, BucketSlot* slot, BucketCall* call) const {
  call->bucket = bucket;
  call->slot = slot;
  call->grad = grad;
  call->residual = {};
  call->memory = nullptr;
  call->velocity = {};
  call->momentum = 0;
  call->step_buckets.assign(step_buckets.begin(), step_buckets.end());
  call->schedule = nullptr;
  call->probe = nullptr;
  call->sparse_probe = false;
  call->probe_algorithm.clear();
  call->state = BucketCall::State::kFresh;
  call->status = absl::OkStatus();
  call->refused = false;
  call->prepare_s = 0;
  auto refuse = [call](absl::Status s) {
    call->refused = true;
    call->status = std::move(s);
  };
  if (!step_open_)
    return refuse(absl::FailedPreconditionError("PlanBucket: no open step (BeginStep)"));
  if (slot->residual.empty()) slot->residual.assign(grad.size(), 0.0f);
  if (slot->residual.size() != grad.size()) {
    return refuse(absl::InvalidArgumentError(absl::StrCat("bucket ", bucket, ": ", grad.size(),
                                                          " elements, its residual holds ",
                                                          slot->residual.size())));
  }
  call->residual = slot->residual;
  if (bucket >= kMaxStepBuckets) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket, ": at most ", kMaxStepBuckets, " buckets a step")));
  }
  if (!begin_status_.ok()) {
    call->status = begin_status_;  // the step could not begin: the gradient is kept
    return;
  }
  const member::BucketChoice choice =
      member::ChooseBucketAlgorithm(*plan_, rules_, next_step_, bucket, grad.size());
  call->algorithm = choice.algorithm;
  call->dense_probe = choice.dense_probe;
  absl::StatusOr<collectives::SparseAllreduce*> algorithm =
      SlotAlgorithm(choice.algorithm, plan_->epoch, slot, hierarchical_ ? &layout_ : nullptr);
  if (!algorithm.ok()) {
    call->status = algorithm.status();
    return;
  }
  call->schedule = *algorithm;
  // The probe's call id counts down from the top of the step's id range:
  // free while the step's buckets fill at most half of it.
  const bool room = step_buckets.size() <= kMaxStepBuckets / 2;
  call->dense_probe = choice.dense_probe && room;
  call->sparse_probe = choice.sparse_probe && room;
  if (call->dense_probe || call->sparse_probe) {
    call->probe_algorithm = call->dense_probe ? member::DenseAlgorithm() : choice.probe_algorithm;
    absl::StatusOr<collectives::SparseAllreduce*> probe = SlotAlgorithm(
        call->probe_algorithm, plan_->epoch, slot, hierarchical_ ? &layout_ : nullptr);
    if (!probe.ok()) {
      call->status = probe.status();
      return;
    }
    call->probe = *probe;
  }
  collectives::CallContext& ctx = call->ctx;
  ctx = collectives::CallContext{};
  ctx.transport = step_transport_;
  ctx.job_id = job_id_;
  ctx.epoch = plan_->epoch;
  ctx.call_id = CallId(next_step_, bucket);
  ctx.training_step = next_step_;
  ctx.deadline = transport::DeadlineIn(plan_->step_deadline);  // renewed when the exchange starts
  ctx.bucket_index = bucket;
  ctx.step_buckets = call->step_buckets;
  ctx.blame = &step_blame_;
  ctx.refuse_nonfinite = rules_.refuse_nonfinite;
  call->options = Options(static_cast<int>(bucket));
}

void Agent::PrepareBucket(BucketCall* call) {
  if (call->refused || !call->status.ok() || call->schedule == nullptr ||
      call->state != BucketCall::State::kFresh) {
    return;
  }
  const transport::Clock::time_point start = transport::Clock::now();
  absl::Status s = call->schedule->PrepareCall(call->ctx, call->options, call->grad, call->residual,
                                               call->velocity, call->momentum, call->memory);
  call->prepare_s = Seconds(transport::Clock::now() - start);
  if (s.ok()) {
    call->state = BucketCall::State::kPrepared;
  } else {
    call->state = BucketCall::State::kKept;  // the frame put grad + old residual back
    call->status = std::move(s);
  }
}

void Agent::AbandonBucket(BucketCall* call) {
  if (call->refused) return;
  if (call->state == BucketCall::State::kPrepared) {
    call->schedule->AbandonCall();
  } else if (call->state == BucketCall::State::kFresh) {
    if (call->memory != nullptr) {
      (void)call->memory->Accumulate(call->grad, call->residual, call->velocity, call->momentum);
    } else {
      (void)collectives::AccumulateIntoResidual(call->grad, call->residual, call->velocity,
                                                call->momentum);
    }
  }
  call->state = BucketCall::State::kKept;
}

absl::Status Agent::ExchangeBucket(BucketCall* call, BucketOutcome* out) {
  if (call->refused) return call->status;
  if (!step_open_) {
    AbandonBucket(call);
    return absl::FailedPreconditionError("ExchangeBucket: no open step (BeginStep)");
  }
  out->algorithm = call->algorithm;
  out->exchange = hierarchical_ && dynamic_cast<collectives::algorithms::HierarchicalAllreduce*>(
                                       call->schedule) == nullptr
                      ? absl::StrCat("flat (", call->algorithm, " runs flat only)")
                      : layout_line_;
  out->dense_probe = call->dense_probe;
  out->sparse_probe = call->sparse_probe;
  out->stats = collectives::CallStats{};
  out->seconds = 0;
  if (!step_status_.ok()) return KeepCall(call);
  const uint32_t bucket = call->bucket;
  const uint64_t step = next_step_;
  if (call->status.ok() && call->state == BucketCall::State::kFresh) PrepareBucket(call);
  if (!call->status.ok()) {
    // Planning or preparing failed: the step fails here, in issue order, as
    // an exchange would (the peers waiting on this bucket fail now).
    step_status_ = Fail(
        absl::Status(call->status.code(),
                     absl::StrCat("step ", step, " epoch ", plan_ == nullptr ? 0 : plan_->epoch,
                                  " rank ", rank_, " (", call->algorithm, ", bucket ", bucket,
                                  ") before its exchange: ", call->status.message())));
    return KeepCall(call);
  }
  if (call->dense_probe || call->sparse_probe) {
    // Before the bucket's own exchange, on every rank in the same order.
    absl::Status p = TimeProbe(*call, &out->probe_seconds);
    if (!p.ok()) {
      AbandonBucket(call);  // the prepared call puts grad + old residual back
      step_status_ = Fail(absl::Status(
          p.code(), absl::StrCat("step ", step, " epoch ", plan_->epoch, " rank ", rank_, " of ",
                                 plan_->world(), " (", call->dense_probe ? "dense" : "sparse",
                                 " probe of bucket ", bucket, "): ", p.message())));
      return step_status_;
    }
  }
  const transport::Clock::time_point call_start = transport::Clock::now();
  absl::Status s = call->schedule->ExchangeCall(&out->result, &out->stats,
                                                transport::DeadlineIn(plan_->step_deadline));
  call->state = s.ok() ? BucketCall::State::kDone : BucketCall::State::kKept;
  out->seconds = Seconds(transport::Clock::now() - call_start) + call->prepare_s;
  if (!s.ok()) {
    // The algorithm kept grad + old residual; the rest of the step follows.
    s = NameWait(std::move(s), call_start);
    step_status_ = Fail(
        absl::Status(s.code(), absl::StrCat("step ", step, " epoch ", plan_->epoch, " rank ", rank_,
                                            " of ", plan_->world(), " (", call->algorithm,
                                            ", bucket ", bucket, "): ", s.message())));
    return step_status_;
  }
  if (const double bad = out->stats.Detail("residual_nonfinite"); bad > 0) {
    // Loud, but not a failed exchange: the peers got this rank's
    // contribution without the poisoned entries; the trainer's bucket fails
    // (NonFiniteResidual) and the residual is clean from here on.
    std::fprintf(stderr, "gradex agent %s (rank %d, epoch %u, step %llu): %s\n",
                 options_.agent_id.c_str(), rank_, plan_->epoch,
                 static_cast<unsigned long long>(step),
                 std::string(NonFiniteResidual(bucket, out->stats).message()).c_str());
  }
  const int q = std::max(plan_->world() / std::max(plan_->teams, 1), 1);
  if (call->on_result) call->on_result(*out);
  out->residual_l2 = CallResidualL2(*call);
  if (metrics_ != nullptr) {
    metrics_->ObserveCall(call->algorithm, out->stats, call->grad.size(), out->residual_l2,
                          out->result, rank_ % q);
  }
  member::StepReport::Bucket b;
  b.elements = call->grad.size();
  b.team_position = rank_ % q;
  b.kprime_used = static_cast<size_t>(out->stats.Detail("kprime_used"));  // 0: none
  b.post_gather_count = static_cast<size_t>(out->stats.Detail("post_gather_count"));
  b.result_nnz = out->stats.result_nnz;
  // A probe step reports the probe: the coordinator's sample of the side
  // that does not run (dense beside a sparse bucket, sparse in the warm-up).
  const bool probed = call->dense_probe || call->sparse_probe;
  b.algorithm = probed ? call->probe_algorithm : call->algorithm;
  b.seconds = probed ? out->probe_seconds : out->seconds;
  b.dense_probe = call->dense_probe;
  step_buckets_.push_back(std::move(b));
  step_stats_.push_back(out->stats);
  return absl::OkStatus();
}

absl::Status Agent::TimeProbe(const BucketCall& call, double* seconds) {
  const size_t n = call.grad.size();
  std::vector<float> grad(n, 0.0f), residual(n, 0.0f);
  if (call.sparse_probe) {
    if (call.memory == nullptr) {
      std::copy(call.grad.begin(), call.grad.end(), grad.begin());
    } else {
      // A device bucket's gradient is not on the host: a stand-in of the
      // same size whose magnitudes differ per rank and per element, so the
      // selections and what they send are those of a gradient, not of zeros.
      uint32_t x = 0x9e3779b9u ^ static_cast<uint32_t>(rank_ + 1);
      for (float& v : grad) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;  // xorshift32
        v = static_cast<float>(static_cast<int32_t>(x)) * 0x1p-31f;
      }
    }
  }
  collectives::CallContext ctx = call.ctx;
  ctx.call_id = CallId(next_step_, static_cast<uint32_t>(kMaxStepBuckets - 1 - call.bucket));
  ctx.deadline = transport::DeadlineIn(plan_->step_deadline);
  const transport::Clock::time_point start = transport::Clock::now();
  absl::Status s = call.probe->PrepareCall(ctx, call.options, grad, residual, {}, 0, nullptr);
  collectives::AllreduceResult result;
  collectives::CallStats stats;
  if (s.ok())
    s = call.probe->ExchangeCall(&result, &stats, transport::DeadlineIn(plan_->step_deadline));
  *seconds = Seconds(transport::Clock::now() - start);
  return s;
}

}  // namespace gradex::pipeline
