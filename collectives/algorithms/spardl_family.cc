#include "collectives/algorithms/spardl_family.h"

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/spardl_balance.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/call_frame.h"
#include "collectives/phase_timer.h"
#include "collectives/volume_model.h"

namespace gradex::collectives::algorithms {

absl::StatusOr<Volume> SparDLFamily::ModelVolume(int rank, int world, size_t n,
                                                 const AllreduceOptions& options,
                                                 const CallStats& observed) const {
  absl::StatusOr<int> teams = Teams(options, world);
  if (!teams.ok()) return teams.status();
  const BlockLayout layout(n, world / *teams, options.density);
  const int me = rank % layout.parts();
  Volume v = SrsAndBruckVolume(layout, me);
  SyncVolume(*teams, layout.range(me).size(), layout.keep(me),
             static_cast<size_t>(observed.Detail("kprime_used")), &v);
  return v;
}

absl::Status SparDLFamily::CheckOptions(const CallContext& ctx,
                                        const AllreduceOptions& options) const {
  return Teams(options, ctx.transport->size()).status();
}

absl::Status SparDLFamily::LocalSelection(const CallContext& ctx, const AllreduceOptions& options,
                                          LocalInput& in, ResidualLedger& ledger,
                                          CallStats* stats) {
  const int world = ctx.transport->size();
  absl::StatusOr<int> teams = Teams(options, world);
  if (!teams.ok()) return teams.status();
  const int parts = world / *teams;
  if (in.size() != n_ || parts != parts_ || ctx.epoch != epoch_) {
    // Boundaries belong to one bucket size, team layout and epoch.
    bounds_.clear();
    n_ = in.size();
    parts_ = parts;
    epoch_ = ctx.epoch;
  }
  const BlockLayout layout = Layout(in.size(), parts, options.density);
  held_.clear();
  // Spar-Reduce-Scatter's first selection: every block's top entries.
  const std::vector<size_t> keeps = Param(options, "spardl_full_reselect") != 0
                                        ? SrsLocalKeeps(layout, ctx.transport->rank() % parts)
                                        : layout.keeps();
  local_.SelectBlocks(in, layout.bounds(), keeps, options.threshold_reuse, ledger, stats, &held_);
  return absl::OkStatus();
}

absl::Status SparDLFamily::Exchange(const CallContext& ctx, const AllreduceOptions& options,
                                    std::span<float> acc, ResidualLedger& ledger,
                                    AllreduceResult* result, CallStats* stats) {
  const int world = ctx.transport->size();
  const int rank = ctx.transport->rank();
  absl::StatusOr<int> teams = Teams(options, world);
  if (!teams.ok()) return teams.status();
  Link link(ctx, id(), &stats->phases);
  const Group team = TeamGroup(rank, world, *teams);
  const BlockLayout layout = Layout(acc.size(), team.size(), options.density);

  keep_cancelled_ = SendsHome(options, layout, acc.size());
  kernels::SparseVec owned;
  std::vector<kernels::SparseVec> blocks;
  absl::Status st = SparReduceScatter(link, team, layout, std::move(held_), kPhaseSrs,
                                      keep_cancelled_, ledger, &stats->phases, &owned);
  held_.clear();
  if (st.ok() && *teams > 1) {
    st = SyncTeams(link, CrossTeamGroup(rank, world, *teams), layout.expect(team.me), options,
                   ledger, stats, &owned);
  }
  if (st.ok()) {
    DropZeros(&owned);
    std::vector<wire::ExpectedBlock> expect;
    for (int b = 0; b < layout.parts(); ++b) expect.push_back(layout.expect(b));
    st = BruckAllGather(link, team, expect, kPhaseAllGather, &stats->phases, std::move(owned),
                        &blocks);
  }
  if (!st.ok()) return st;
  {
    PhaseTimer t(&stats->phases.reduction_s);
    result->is_dense = false;
    result->dense.clear();
    ConcatBlocks(blocks, &result->sparse);
    if (keep_cancelled_) ledger.SendHomeUndelivered(result->sparse);
  }
  stats->result_nnz = result->sparse.nnz();
  stats->result_capacity = layout.total_keep();
  Rebalance(ctx, options, layout, result->sparse);
  stats->details["balanced_block_begin"] = static_cast<double>(layout.bounds()[team.me]);
  return absl::OkStatus();
}

bool SparDLFamily::SendsHome(const AllreduceOptions& options, const BlockLayout& layout,
                             size_t n) const {
  if (Param(options, "spardl_residual_home") == 0) return false;
  // Where every entry is kept (density 1) nothing is cut: dense leaves no
  // residual either. The rule needs every copy of a block to agree on its
  // cancelled sums: no block may be dense on the wire (AppendBlockFrame
  // picks dense only above half the block).
  if (layout.total_keep() >= n) return false;
  for (int b = 0; b < layout.parts(); ++b) {
    if (layout.keep(b) * 2 > layout.range(b).size()) return false;
  }
  return true;
}

BlockLayout SparDLFamily::Layout(size_t n, int parts, double density) const {
  if (bounds_.size() == static_cast<size_t>(parts) + 1 && bounds_.back() == n) {
    return BlockLayout(n, parts, density, bounds_);
  }
  return BlockLayout(n, parts, density);
}

void SparDLFamily::Rebalance(const CallContext& ctx, const AllreduceOptions& options,
                             const BlockLayout& layout, const kernels::SparseVec& result) {
  const double tau = Param(options, "spardl_balance_tau");
  if (tau < 1 || options.density > kMaxBalancedDensity || layout.parts() < 2) return;
  if ((ctx.training_step + 1) % static_cast<uint64_t>(tau) != 0) return;
  bounds_ = BalancedBounds(result, layout.bounds(), layout.keeps());
}

}  // namespace gradex::collectives::algorithms
