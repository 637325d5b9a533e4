// gtopk (Shi et al., ICDCS 2019, global top-k): every rank keeps its local
// top-k of gradient + residual, then a binomial reduction tree over
// p2 = 2^floor(log2 P) ranks: at level j the ranks at an odd multiple of 2^j
// send their current top-k to the rank 2^j below and leave the tree; the
// receiver sums and keeps the top k, and what it drops goes to its own
// residual (global residual collection: the dropper keeps it). The root's
// top-k is the result, broadcast down the same tree, so every rank has the
// root's bits. Other P fold first (power_of_two_fold.h): the even rank of a
// pair sends its top-k to the odd one, which sums and re-selects, and gets the
// result back at the end. The root moves 2 log2(p2) k entries (Table 1 of
// the Ok-Topk paper: 4k log P words); the result has at most k non-zeros.
#include "absl/strings/str_cat.h"
#include "collectives/algorithms/power_of_two_fold.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/call_frame.h"
#include "collectives/link.h"
#include "collectives/local_topk.h"
#include "collectives/phase_timer.h"
#include "collectives/residual_ledger.h"

namespace gradex::collectives::algorithms {
namespace {

enum : uint16_t { kPhaseFoldIn = 1, kPhaseReduce = 2, kPhaseBroadcast = 3, kPhaseFoldOut = 4 };

// One message of the schedule: send (or receive) a top-k to (from) `peer`.
struct Move {
  uint16_t phase;
  uint32_t sub;
  bool send;
  int peer;  // global rank
};

std::vector<Move> Schedule(int rank, int world) {
  const PowerOfTwoFold fold(rank, world);
  std::vector<Move> moves;
  if (fold.folded_out) {
    moves.push_back({kPhaseFoldIn, 0, true, fold.partner});
    moves.push_back({kPhaseFoldOut, 0, false, fold.partner});
    return moves;
  }
  if (fold.partner >= 0) moves.push_back({kPhaseFoldIn, 0, false, fold.partner});
  const int me = fold.active, levels = fold.levels();
  for (int j = 0; j < levels; ++j) {
    const int d = 1 << j;
    if (me % (2 * d) == d) {
      moves.push_back({kPhaseReduce, uint32_t(j), true, fold.Global(me - d)});
      break;
    }
    moves.push_back({kPhaseReduce, uint32_t(j), false, fold.Global(me + d)});
  }
  for (int j = levels - 1; j >= 0; --j) {
    const int d = 1 << j;
    if (me % (2 * d) == 0)
      moves.push_back({kPhaseBroadcast, uint32_t(j), true, fold.Global(me + d)});
    if (me % (2 * d) == d)
      moves.push_back({kPhaseBroadcast, uint32_t(j), false, fold.Global(me - d)});
  }
  if (fold.partner >= 0) moves.push_back({kPhaseFoldOut, 0, true, fold.partner});
  return moves;
}

class GTopk final : public SparseAllreduce {
 public:
  std::string_view name() const override { return "gtopk"; }

  // Every message carries k entries (a sum that cancels to zero is not sent,
  // hence the default 3% slack).
  absl::StatusOr<Volume> ModelVolume(int rank, int world, size_t n, const AllreduceOptions& options,
                                     const CallStats&) const override {
    const uint64_t bytes =
        wire::FrameBytes(static_cast<uint32_t>(n), KeepCount(options.density, n));
    Volume v;
    for (const Move& m : Schedule(rank, world)) {
      (m.send ? v.sent_bytes : v.recv_bytes) += bytes;
      v.messages += m.send;
    }
    return v;
  }

  // The local top-k is the call's local part (PrepareCall).
  absl::Status LocalSelection(const CallContext&, const AllreduceOptions& options, LocalInput& in,
                              ResidualLedger& ledger, CallStats* stats) override {
    local_.Select(in, KeepCount(options.density, in.size()), options.threshold_reuse, ledger, stats,
                  &selected_);
    stats->details["local_selected"] = static_cast<double>(selected_.nnz());
    return absl::OkStatus();
  }

  absl::Status Exchange(const CallContext& ctx, const AllreduceOptions& options,
                        std::span<float> acc, ResidualLedger& ledger, AllreduceResult* result,
                        CallStats* stats) override {
    const size_t n = acc.size(), k = KeepCount(options.density, n);
    absl::Status st;
    kernels::SparseVec current = std::move(selected_);
    selected_ = {};
    Link link(ctx, id(), &stats->phases);
    const wire::ExpectedBlock whole{{0, static_cast<uint32_t>(n)}, static_cast<uint32_t>(k)};
    for (const Move& m : Schedule(ctx.transport->rank(), ctx.transport->size())) {
      st = m.send ? SendTopK(link, m, whole.range, current)
                  : ReceiveTopK(link, m, whole, k, ledger, &stats->phases, &current);
      if (!st.ok()) break;
    }
    if (!st.ok()) return st;
    {
      PhaseTimer t(&stats->phases.reduction_s);
      DropZeros(&current);
      result->is_dense = false;
      result->dense.clear();
      result->sparse = std::move(current);
    }
    stats->result_nnz = result->sparse.nnz();
    stats->result_capacity = k;
    return absl::OkStatus();
  }

 protected:
  // The local top-k (LocalTopK) and an exchange that reads the residual
  // for its size: the residual may live on a device.
  bool DeviceLocalPart() const override { return true; }

 private:
  static absl::Status SendTopK(Link& link, const Move& m, wire::BlockRange range,
                               const kernels::SparseVec& v) {
    transport::Bytes out;
    wire::AppendBlockFrame(link.meta(m.phase), range, kernels::View(v), &out);
    return link.Send(m.peer, std::move(out), m.phase, m.sub);
  }

  // Receives a top-k; on the way up (fold in, reduce) sums it into `current`
  // and keeps the top k, dropping the rest into this rank's residual; on the
  // way down (broadcast, fold out) it replaces `current`.
  static absl::Status ReceiveTopK(Link& link, const Move& m, const wire::ExpectedBlock& whole,
                                  size_t k, ResidualLedger& ledger, PhaseTimes* times,
                                  kernels::SparseVec* current) {
    absl::StatusOr<transport::Bytes> in =
        link.Recv(m.peer, m.phase, m.sub, wire::ExpectedMessageBytes({&whole, 1}));
    if (!in.ok()) return in.status();
    std::vector<kernels::SparseVec> got;
    {
      PhaseTimer t(&times->communication_s);
      absl::Status st =
          wire::DecodeSparseBlocks(*in, link.meta(m.phase, m.peer), {&whole, 1}, &got);
      if (!st.ok()) return st;
      // A dense frame carries no count: hold its nonzeros to k too.
      if (got[0].nnz() > k) {
        return absl::DataLossError(
            absl::StrCat("rank ", m.peer, " sent ", got[0].nnz(), " entries, more than k = ", k));
      }
    }
    if (m.phase == kPhaseBroadcast || m.phase == kPhaseFoldOut) {
      *current = std::move(got[0]);
      return absl::OkStatus();
    }
    kernels::SparseVec merged;
    {
      PhaseTimer t(&times->reduction_s);
      kernels::MergeAdd(kernels::View(*current), kernels::View(got[0]), &merged);
    }
    PhaseTimer t(&times->selection_s);
    if (merged.nnz() <= k) {
      *current = std::move(merged);
      return absl::OkStatus();
    }
    kernels::SparseVec dropped;
    kernels::SparseTopK(kernels::View(merged), k, current, &dropped);
    ledger.Discarded(std::move(dropped), 1.0f);
    return absl::OkStatus();
  }

  kernels::SparseVec selected_;  // LocalSelection's top-k, handed to Exchange
  LocalTopK local_;
};

}  // namespace

GRADEX_REGISTER_ALGORITHM("gtopk", [] { return std::make_unique<GTopk>(); });

}  // namespace gradex::collectives::algorithms
