// oktopk: local top-k of gradient + residual (reused threshold), split and
// reduce over P regions balanced on the local top-k coordinates (rotated,
// bucketed), global top-k of the reduced regions (reused threshold), data
// balancing and all-gatherv; the residual rule of Algorithm 2.
#include "collectives/algorithms/oktopk/oktopk.h"

#include <algorithm>
#include <utility>

#include "collectives/algorithms/oktopk/oktopk_balance.h"
#include "collectives/algorithms/oktopk/oktopk_exchange.h"
#include "collectives/block_layout.h"
#include "collectives/call_frame.h"
#include "collectives/phase_timer.h"
#include "collectives/residual_ledger.h"

namespace gradex::collectives::algorithms::oktopk {
namespace {

// Entries of `local` whose index is neither delivered (in the result) nor
// cancelled (its sum over ranks is exactly zero). All three are sorted.
kernels::SparseVec Undelivered(const kernels::SparseVec& local, const kernels::SparseVec& result,
                               const kernels::SparseVec& cancelled) {
  kernels::SparseVec out;
  size_t r = 0, c = 0;
  for (size_t i = 0; i < local.nnz(); ++i) {
    const uint32_t x = local.idx[i];
    while (r < result.nnz() && result.idx[r] < x) ++r;
    while (c < cancelled.nnz() && cancelled.idx[c] < x) ++c;
    if ((r < result.nnz() && result.idx[r] == x) || (c < cancelled.nnz() && cancelled.idx[c] == x))
      continue;
    out.idx.push_back(x);
    out.val.push_back(local.val[i]);
  }
  return out;
}

class OkTopk final : public SparseAllreduce {
 public:
  explicit OkTopk(OkTopkConfig config)
      : rule_(config.rule),
        agreement_(config.agreement ? std::move(config.agreement)
                                    : std::make_unique<MeanBoundaryAgreement>()),
        local_ctl_(config.rule),
        global_ctl_(config.rule) {}

  std::string_view name() const override { return "oktopk"; }

  // The α-β volume of the schedule on the call's observed counts: 8 bytes per
  // COO entry and 48 per frame (Table 1's 2 words an entry, plus headers).
  absl::StatusOr<Volume> ModelVolume(int, int, size_t, const AllreduceOptions&,
                                     const CallStats& observed) const override {
    Volume v;
    v.sent_bytes = 48 * observed.frames_sent + 8 * observed.coo_entries_sent;
    v.recv_bytes = 48 * observed.frames_recv + 8 * observed.coo_entries_recv;
    v.messages = observed.messages_sent;
    return v;
  }

  const OkTopkCallInfo& last() const { return last_; }

 protected:
  absl::Status CheckOptions(const CallContext& ctx, const AllreduceOptions& options) const override;
  // Step 1, the local selection (before any message): the gradient is added
  // inside its pass.
  absl::Status LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                              LocalInput& in, ResidualLedger& ledger, CallStats* stats) override;
  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) override;
  // A failed call ends the epoch; the next one re-agrees everything.
  void AfterFailure() override { Reset(); }

 private:
  // Both selections are exact every τ' steps (and reuse thresholds between).
  bool ExactDue(const CallContext& ctx, const AllreduceOptions& options) const {
    return ctx.training_step % static_cast<uint64_t>(Param(options, "oktopk_tau_prime")) == 0;
  }
  void Reset() {
    bounds_.clear();
    local_ctl_.Reset();
    global_ctl_.Reset();
  }

  ThresholdRule rule_;
  std::unique_ptr<BoundaryAgreement> agreement_;
  ThresholdController local_ctl_, global_ctl_;
  Boundaries bounds_;         // empty until agreed
  kernels::SparseVec local_;  // LocalSelection's, handed to Exchange
  size_t n_ = 0;
  int world_ = 0;
  uint32_t epoch_ = 0;
  OkTopkCallInfo last_;
};

absl::Status OkTopk::CheckOptions(const CallContext&, const AllreduceOptions& options) const {
  if (Param(options, "oktopk_tau") < 1 || Param(options, "oktopk_tau_prime") < 1) {
    return absl::InvalidArgumentError("oktopk_tau and oktopk_tau_prime must be >= 1");
  }
  return absl::OkStatus();
}

absl::Status OkTopk::LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                                    LocalInput& in, ResidualLedger& ledger, CallStats* stats) {
  last_ = {};
  // Boundaries and thresholds belong to one communicator and one bucket size.
  if (in.size() != n_ || ctx.transport->size() != world_ || ctx.epoch != epoch_) {
    Reset();
    n_ = in.size();
    world_ = ctx.transport->size();
    epoch_ = ctx.epoch;
  }
  const size_t k = KeepCount(options.density, in.size());
  const bool refresh = ExactDue(ctx, options);
  // The selected values leave the residual (the ledger puts back those the
  // global selection does not deliver).
  PhaseTimer t(&stats->phases.selection_s);
  SelectLocal(in, k, k >= in.size(), refresh, local_ctl_, &local_, &last_.local);
  const std::span<float> acc = in.Accumulated();  // done by now: a no-op
  for (uint32_t i : local_.idx) acc[i] = 0.0f;
  ledger.Selected(local_);
  return absl::OkStatus();
}

absl::Status OkTopk::Exchange(const CallContext& ctx, const AllreduceOptions& options,
                              std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                              CallStats* stats) {
  const int p = ctx.transport->size(), me = ctx.transport->rank();
  const size_t n = acc.size();
  const size_t k = KeepCount(options.density, n);
  const bool keep_all = k >= n;
  const bool refresh = ExactDue(ctx, options);
  const size_t local_cap =
      keep_all || rule_ == ThresholdRule::kAuthors ? n : std::min(n, BandHigh(k));
  PhaseTimes* times = &stats->phases;
  Link link(ctx, id(), times);
  WireCount wire;

  // 1. The local selection ran in LocalSelection.
  kernels::SparseVec local = std::move(local_);
  local_ = {};
  // 2. Region boundaries, at the first call and every τ calls.
  if (bounds_.empty() ||
      ctx.training_step % static_cast<uint64_t>(Param(options, "oktopk_tau")) == 0) {
    std::vector<uint32_t> proposal = ProposeBoundaries(local, n, p);
    auto agreed = agreement_->Agree(link, proposal, n, times, &wire);
    if (!agreed.ok()) return agreed.status();
    bounds_ = std::move(*agreed);
    last_.agreed = true;
  }
  // 3. Split and reduce: region j's part goes to rank j, rotated and bucketed.
  std::vector<kernels::SparseVec> parts;
  SplitByRegions(local, bounds_, &parts);
  kernels::SparseVec reduced = std::move(parts[me]), merged;
  AllToAllPlan plan{std::vector<bool>(p, true), std::vector<bool>(p, true),
                    std::vector<transport::Bytes>(p)};
  {
    PhaseTimer t(&times->communication_s);
    for (int d = 1; d < p; ++d) {
      const int to = (me + d) % p;
      AppendCounted(link.meta(kOkPhaseSplitReduce), Region(bounds_, to), kernels::View(parts[to]),
                    &wire, &plan.out[d]);
    }
  }
  const wire::BlockRange mine = Region(bounds_, me);
  const wire::ExpectedBlock want{mine,
                                 static_cast<uint32_t>(std::min<size_t>(mine.size(), local_cap))};
  std::vector<kernels::SparseVec> got;
  absl::Status st = RotatedAllToAll(
      link, kOkPhaseSplitReduce, std::min(4, p), std::move(plan),
      [&](int d, const transport::Bytes& msg) -> absl::Status {
        absl::Status s = DecodeCounted(msg, link.meta(kOkPhaseSplitReduce, (me - d + p) % p),
                                       {&want, 1}, &wire, &got);
        if (!s.ok()) return s;
        PhaseTimer t(&times->reduction_s);
        kernels::MergeAdd(kernels::View(reduced), kernels::View(got[0]), &merged);
        std::swap(reduced, merged);
        return absl::OkStatus();
      });
  if (!st.ok()) return st;
  // Sums that cancelled to exactly zero are delivered as zeros: their indices
  // travel so that the contributors drop their parts from the residual.
  kernels::SparseVec nonzero, cancelled;
  for (size_t i = 0; i < reduced.nnz(); ++i) {
    kernels::SparseVec& into = reduced.val[i] == 0.0f ? cancelled : nonzero;
    into.idx.push_back(reduced.idx[i]);
    into.val.push_back(reduced.val[i] == 0.0f ? 1.0f : reduced.val[i]);
  }
  // 4. Global selection on the reduced regions.
  kernels::SparseVec selected;
  std::vector<uint32_t> counts, zero_counts;
  st = SelectGlobal(link, nonzero, static_cast<uint32_t>(cancelled.nnz()), k, keep_all, refresh,
                    global_ctl_, times, &wire, &selected, &counts, &zero_counts, &last_.global);
  if (!st.ok()) return st;
  // 5. Balance (when lopsided) and all-gatherv.
  kernels::SparseVec all_cancelled;
  st = BalanceAndAllGather(link, bounds_, counts, zero_counts, std::move(selected),
                           std::move(cancelled), times, &wire, &result->sparse, &all_cancelled,
                           &last_.balanced);
  if (!st.ok()) return st;
  // 6. Algorithm 2: the residual keeps what this rank selected but the global
  // selection did not deliver.
  {
    PhaseTimer t(&times->reduction_s);
    ledger.Discarded(Undelivered(local, result->sparse, all_cancelled), 1.0f);
  }
  result->is_dense = false;
  result->dense.clear();
  stats->result_nnz = result->sparse.nnz();
  stats->result_capacity =
      keep_all || rule_ == ThresholdRule::kAuthors ? n : std::min(n, BandHigh(k));
  stats->details["local_selected"] = static_cast<double>(local.nnz());
  double global = 0;
  for (uint32_t c : counts) global += c;
  stats->details["global_selected"] = global;
  // The thresholds this call selected at (Ok-Topk's reused thresholds, or the
  // exact k-th magnitudes at a refresh or fallback; 0: everything kept).
  stats->details["local_threshold"] = last_.local.threshold;
  stats->details["global_threshold"] = last_.global.threshold;
  stats->coo_entries_sent = wire.entries_sent;
  stats->coo_entries_recv = wire.entries_recv;
  stats->frames_sent = wire.frames_sent;
  stats->frames_recv = wire.frames_recv;
  return absl::OkStatus();
}

}  // namespace

const OkTopkCallInfo* OkTopkLastCall(const SparseAllreduce& algorithm) {
  const auto* ok = dynamic_cast<const OkTopk*>(&algorithm);
  return ok == nullptr ? nullptr : &ok->last();
}

std::unique_ptr<SparseAllreduce> CreateOkTopk() { return CreateOkTopk(OkTopkConfig{}); }

GRADEX_REGISTER_ALGORITHM("oktopk", [] { return CreateOkTopk(); });
std::unique_ptr<SparseAllreduce> CreateOkTopk(OkTopkConfig config) {
  return std::make_unique<OkTopk>(std::move(config));
}

}  // namespace gradex::collectives::algorithms::oktopk
