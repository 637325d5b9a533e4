#include "collectives/call_frame.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/phase_timer.h"
#include "collectives/residual_ledger.h"

namespace gradex {

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

namespace {

// Fills the byte counters and totals of `stats` at the end of a call.
void FinishStats(const CallContext& ctx, const PeerCounters& before, Clock::time_point start,
                 CallStats* stats) {
  PeerCounters after = ctx.transport->TotalCounters();
  stats->sent_bytes = after.sent_bytes - before.sent_bytes;
  stats->recv_bytes = after.recv_bytes - before.recv_bytes;
  stats->messages_sent = after.sent_messages - before.sent_messages;
  stats->total_s = std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

size_t MessageBound(size_t n, int world) {
  const size_t p = static_cast<size_t>(std::max(world, 1));
  return p * (8 * n + 64 * (p + 4)) + 65536;
}

absl::Status SparseAllreduce::Run(const CallContext& caller, const AllreduceOptions& options,
                                  std::span<const float> grad, std::span<float> residual,
                                  AllreduceResult* result, CallStats* stats) {
  absl::Status st = ValidateCall(caller, options, grad, residual, result, stats);
  if (!st.ok()) return st;
  CallContext ctx = caller;
  if (ctx.max_message_bytes == 0) {
    ctx.max_message_bytes = MessageBound(grad.size(), ctx.transport->size());
  }
  st = CheckOptions(ctx, options);
  if (!st.ok()) return st;
  const auto start = Clock::now();
  *stats = CallStats{};
  const PeerCounters before = ctx.transport->TotalCounters();
  // With a coefficient c < 1 the old residual is kept aside (a failed call
  // puts back grad + old residual: nothing decays) and old - c * old is
  // reported as decayed when the call succeeds, so that conservation stays
  // checkable. One pass; the buffers live with the algorithm across calls.
  const float c = ResidualCoefficient(ctx, options);
  const bool decays = c != 1.0f;
  {
    PhaseTimer t(&stats->phases.reduction_s);
    if (!decays) {
      for (size_t i = 0; i < grad.size(); ++i) residual[i] += grad[i];
    } else {
      ef_prior_.resize(grad.size());
      ef_decayed_.resize(grad.size());
      for (size_t i = 0; i < grad.size(); ++i) {
        const float old = residual[i], kept = c * old;
        ef_prior_[i] = old;
        ef_decayed_[i] = old - kept;
        residual[i] = kept + grad[i];
      }
    }
  }
  ResidualLedger ledger(residual);
  st = Exchange(ctx, options, residual, ledger, result, stats);
  if (!st.ok()) {
    ledger.Restore();  // the residual holds grad + old residual again
    if (decays) {
      for (size_t i = 0; i < grad.size(); ++i) residual[i] = ef_prior_[i] + grad[i];
    }
    AfterFailure();
    return st;
  }
  {
    PhaseTimer t(&stats->phases.reduction_s);
    ledger.Commit();
    if (decays) {
      result->decayed.swap(ef_decayed_);  // the caller's old buffer is reused next call
      stats->details["ef_coefficient"] = c;
    } else {
      result->decayed.clear();
    }
  }
  FinishStats(ctx, before, start, stats);
  return absl::OkStatus();
}

}  // namespace gradex
