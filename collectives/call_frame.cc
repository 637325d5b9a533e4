#include "collectives/call_frame.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/phase_timer.h"
#include "collectives/residual_ledger.h"

namespace gradex::collectives {

absl::Status ValidateCall(const CallContext& ctx, const AllreduceOptions& options,
                          std::span<const float> grad, std::span<float> residual,
                          AllreduceResult* result, CallStats* stats) {
  if (ctx.transport == nullptr) return absl::InvalidArgumentError("no transport");
  if (result == nullptr || stats == nullptr) return absl::InvalidArgumentError("null output");
  if (grad.size() != residual.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", grad.size(), " elements, residual ", residual.size()));
  }
  if (grad.size() >= std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("gradients of 2^32 elements or more need several buckets");
  }
  if (!(options.density > 0 && options.density <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("density ", options.density, " not in (0, 1]"));
  }
  return absl::OkStatus();
}

size_t AccumulateIntoResidual(std::span<const float> grad, std::span<float> residual) {
  size_t nonfinite = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    residual[i] += grad[i];
    nonfinite += !std::isfinite(residual[i]);
  }
  return nonfinite;
}

size_t AccumulateIntoResidual(std::span<const float> grad, std::span<float> residual,
                              std::span<float> velocity, float momentum) {
  if (velocity.empty()) return AccumulateIntoResidual(grad, residual);
  // Each operation rounded as the fused kernels round it (this file is built
  // with -ffp-contract=off), counting in the same pass.
  size_t nonfinite = 0;
  for (size_t i = 0; i < grad.size(); ++i) {
    const float u = velocity[i] * momentum + grad[i];
    velocity[i] = u;
    residual[i] += u;
    nonfinite += !std::isfinite(residual[i]);
  }
  return nonfinite;
}

namespace {

// After a successful exchange: resets the residual's non-finite entries
// (what the call left unsent) to 0 and reports how many and the first in
// `stats`' details.
absl::Status ResetLeftNonFinite(std::span<float> residual, ResidualMemory* memory,
                                CallStats* stats) {
  size_t left = 0, first = residual.size();
  if (memory == nullptr) {
    left = kernels::ZeroNonFinite(residual.data(), residual.size(), &first);
  } else {
    absl::StatusOr<size_t> n = memory->ZeroNonFinite(residual, &first);
    if (!n.ok()) return n.status();
    left = *n;
  }
  if (left == 0) return absl::OkStatus();
  stats->details["residual_nonfinite"] = static_cast<double>(left);
  stats->details["residual_nonfinite_first"] = static_cast<double>(first);
  return absl::OkStatus();
}

// The first element of the result that is NaN or infinite (SIZE_MAX: none).
size_t FirstNonFinite(const AllreduceResult& r) {
  if (r.is_dense) {
    const size_t i = kernels::FirstNonFinite(r.dense.data(), r.dense.size());
    return i < r.dense.size() ? i : SIZE_MAX;
  }
  const size_t i = kernels::FirstNonFinite(r.sparse.val.data(), r.sparse.nnz());
  return i < r.sparse.nnz() ? r.sparse.idx[i] : SIZE_MAX;
}

absl::Status Overflowed(size_t element) {
  return absl::DataLossError(absl::StrCat(
      wire::kSumOverflowed, " at element ", element,
      " (every value summed was finite: this epoch refuses NaN and infinite ones); every rank "
      "fails this step and keeps its contribution in its residual"));
}

// `s` with this rank's largest contribution (|residual|, restored) named.
absl::Status NameLargest(absl::Status s, std::span<const float> residual, ResidualMemory* memory) {
  std::vector<float> copy;
  if (memory != nullptr) {
    // An error path: the whole residual comes to the host once.
    copy.resize(residual.size());
    if (!memory->CopyToHost(residual, copy).ok()) return s;
    residual = copy;
  }
  size_t at = 0;
  float largest = 0;
  for (size_t i = 0; i < residual.size(); ++i) {
    if (std::fabs(residual[i]) > largest) {
      largest = std::fabs(residual[i]);
      at = i;
    }
  }
  return absl::Status(s.code(), absl::StrCat(s.message(), "; this rank's largest contribution: |",
                                             largest, "| at element ", at));
}

// Fills the byte counters and totals of `stats` at the end of a call.
void FinishStats(const CallContext& ctx, const transport::PeerCounters& before,
                 transport::Clock::time_point start, CallStats* stats) {
  transport::PeerCounters after = ctx.transport->TotalCounters();
  stats->sent_bytes = after.sent_bytes - before.sent_bytes;
  stats->recv_bytes = after.recv_bytes - before.recv_bytes;
  stats->messages_sent = after.sent_messages - before.sent_messages;
  stats->total_s = std::chrono::duration<double>(transport::Clock::now() - start).count();
}

}  // namespace

size_t MessageBound(size_t n, int world) {
  const size_t p = static_cast<size_t>(std::max(world, 1));
  return p * (8 * n + 64 * (p + 4)) + 65536;
}

// What a prepared call holds until it is exchanged or abandoned.
struct SparseAllreduce::Pending {
  CallContext ctx;
  AllreduceOptions options;
  std::span<const float> grad;
  std::span<float> residual;
  ResidualLedger ledger;
  ResidualMemory* memory = nullptr;  // where grad, residual and velocity live (null: host)
  bool decays = false;
  float coefficient = 1.0f;
  CallStats stats;  // the first half's phases and details
  // The residual with this call's gradient, added by the local part or
  // after it; it counts the non-finite entries the accumulation left.
  LocalInput input;
  Pending(std::span<const float> grad, std::span<float> acc, std::span<float> velocity,
          float momentum, ResidualMemory* memory)
      : ledger(acc, memory),
        memory(memory),
        input(grad, acc, &stats.phases, velocity, momentum, memory) {}
};

SparseAllreduce::SparseAllreduce() = default;
SparseAllreduce::~SparseAllreduce() = default;

absl::Status SparseAllreduce::Run(const CallContext& caller, const AllreduceOptions& options,
                                  std::span<const float> grad, std::span<float> residual,
                                  AllreduceResult* result, CallStats* stats) {
  if (result == nullptr || stats == nullptr) return absl::InvalidArgumentError("null output");
  absl::Status st = PrepareCall(caller, options, grad, residual);
  if (!st.ok()) return st;
  return ExchangeCall(result, stats);
}

absl::Status SparseAllreduce::PrepareCall(const CallContext& caller,
                                          const AllreduceOptions& options,
                                          std::span<const float> grad, std::span<float> residual,
                                          std::span<float> velocity, float momentum,
                                          ResidualMemory* memory) {
  if (pending_ != nullptr) {
    return absl::FailedPreconditionError("a prepared call of this algorithm is still pending");
  }
  CallStats scratch;
  AllreduceResult unused;
  absl::Status st = ValidateCall(caller, options, grad, residual, &unused, &scratch);
  if (!st.ok()) return st;
  if (!velocity.empty() && velocity.size() != grad.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient has ", grad.size(), " elements, velocity ", velocity.size()));
  }
  if (!(momentum >= 0.0f && momentum < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum ", momentum, " not in [0, 1)"));
  }
  if (velocity.empty()) momentum = 0.0f;
  auto p = std::make_unique<Pending>(grad, residual, velocity, momentum, memory);
  p->ctx = caller;
  if (p->ctx.max_message_bytes == 0) {
    p->ctx.max_message_bytes = MessageBound(grad.size(), p->ctx.transport->size());
  }
  st = CheckOptions(p->ctx, options);
  if (!st.ok()) return st;
  p->options = options;
  p->grad = grad;
  p->residual = residual;
  const auto start = transport::Clock::now();
  // With a coefficient c < 1 the old residual is kept aside (a failed call
  // puts back grad + old residual: nothing decays) and old - c * old is
  // reported as decayed when the call succeeds, so that conservation stays
  // checkable. One pass; the buffers live with the algorithm across calls.
  p->coefficient = ResidualCoefficient(p->ctx, options);
  p->decays = p->coefficient != 1.0f;
  if (memory != nullptr && !DeviceResidual(p->ctx, options)) {
    return absl::FailedPreconditionError(
        absl::StrCat(std::string(name()),
                     " cannot keep its residual outside host memory (its exchange reads "
                     "the residual's values, or the residual decays)"));
  }
  // The accumulation also counts non-finite entries. A NaN or Inf the call
  // sends is summed like any value (as DDP's allreduce does: loss scalers
  // skip such steps); one it leaves in the residual (a NaN, which no top-k
  // picks, from a gradient or a value received in an earlier call) would
  // stay there for every later step and silently drop its coordinates: after
  // the exchange those are reset to 0 and reported in the call's details
  // ("residual_nonfinite", "residual_nonfinite_first"), and the owner fails
  // the bucket naming them. Without decay the accumulation is the local
  // part's (LocalInput: fused into a selection's first pass where it can).
  if (p->decays) {
    PhaseTimer t(&p->stats.phases.reduction_s);
    if (!velocity.empty()) {
      // The velocity first; from here it is the gradient this call adds
      // (and a failure puts back).
      for (size_t i = 0; i < grad.size(); ++i) velocity[i] = velocity[i] * momentum + grad[i];
      grad = velocity;
      p->grad = grad;
    }
    const float c = p->coefficient;
    ef_prior_.resize(grad.size());
    ef_decayed_.resize(grad.size());
    size_t nonfinite = 0;
    for (size_t i = 0; i < grad.size(); ++i) {
      const float old = residual[i], kept = c * old;
      ef_prior_[i] = old;
      ef_decayed_[i] = old - kept;
      residual[i] = kept + grad[i];
      nonfinite += !std::isfinite(residual[i]);
    }
    p->input.Fused(nonfinite);
  }
  pending_ = std::move(p);
  st = LocalSelection(pending_->ctx, pending_->options, pending_->input, pending_->ledger,
                      &pending_->stats);
  // What the local part left (all of it: the default, or one that failed
  // before it added the gradient, which Unwind then keeps whole).
  pending_->input.Accumulated();
  if (st.ok()) st = pending_->input.status();
  pending_->stats.total_s = std::chrono::duration<double>(transport::Clock::now() - start).count();
  if (!st.ok()) {
    Unwind();
    return st;
  }
  return absl::OkStatus();
}

void SparseAllreduce::Unwind() {
  // The residual holds grad + old residual again (a residual in memory that
  // fails the scatter is lost with its device).
  (void)pending_->ledger.Restore();
  if (pending_->decays) {
    for (size_t i = 0; i < pending_->grad.size(); ++i) {
      pending_->residual[i] = ef_prior_[i] + pending_->grad[i];
    }
  }
  pending_.reset();
  AfterFailure();
}

void SparseAllreduce::AbandonCall() {
  if (pending_ != nullptr) Unwind();
}

absl::Status SparseAllreduce::ExchangeCall(AllreduceResult* result, CallStats* stats,
                                           std::optional<transport::Deadline> deadline) {
  if (pending_ == nullptr) return absl::FailedPreconditionError("no prepared call to exchange");
  if (result == nullptr || stats == nullptr) {
    Unwind();
    return absl::InvalidArgumentError("null output");
  }
  Pending& p = *pending_;
  if (deadline) p.ctx.deadline = *deadline;
  const auto start = transport::Clock::now();
  *stats = std::move(p.stats);
  const double prepare_s = stats->total_s;
  // Counted from here: another call's bytes may have moved while this one
  // was prepared.
  const transport::PeerCounters before = p.ctx.transport->TotalCounters();
  absl::Status st = Exchange(p.ctx, p.options, p.residual, p.ledger, result, stats);
  // Where the epoch refuses non-finite values every value summed was finite:
  // a non-finite result is a sum that overflowed. Every rank gets the same
  // result, so every rank fails here, each naming its own largest
  // contribution (its residual, restored: grad + old residual).
  const size_t overflow = st.ok() && p.ctx.refuse_nonfinite ? FirstNonFinite(*result) : SIZE_MAX;
  if (overflow != SIZE_MAX) st = Overflowed(overflow);
  if (!st.ok()) {
    std::span<float> residual = p.residual;
    ResidualMemory* memory = p.memory;
    Unwind();
    // An overflow found here or before a send (CheckFramesFinite) names this
    // rank's largest contribution.
    if (overflow != SIZE_MAX || (p.ctx.refuse_nonfinite && wire::IsSumOverflow(st))) {
      st = NameLargest(std::move(st), residual, memory);
    }
    return st;
  }
  {
    PhaseTimer t(&stats->phases.reduction_s);
    absl::Status committed = p.ledger.Commit();
    // What the call sent was summed; a non-finite entry it left in the
    // residual would stay there for good (see PrepareCall).
    if (committed.ok() && p.input.nonfinite() > 0) {
      committed = ResetLeftNonFinite(p.residual, p.memory, stats);
    }
    if (!committed.ok()) {
      // Every rank has the result; this rank's residual could not take what
      // it owes: the device memory failed.
      pending_.reset();
      return absl::DataLossError(
          absl::StrCat("the call's residual update failed: ", committed.message()));
    }
    if (p.decays) {
      result->decayed.swap(ef_decayed_);  // the caller's old buffer is reused next call
      stats->details["ef_coefficient"] = p.coefficient;
    } else {
      result->decayed.clear();
    }
  }
  FinishStats(p.ctx, before, start, stats);
  stats->total_s += prepare_s;
  pending_.reset();
  return absl::OkStatus();
}

}  // namespace gradex::collectives
