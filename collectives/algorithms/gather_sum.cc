#include "collectives/algorithms/gather_sum.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/block_layout.h"
#include "collectives/call_frame.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms {
namespace {

enum : uint16_t { kPhaseAllGather = 1 };

// Sums the P selections pairwise ((0+1)+(2+3))+... : the same tree on every
// rank gives the same bits, and costs Pk log P instead of the P^2 k / 2 of a
// running sum.
void SumInFixedOrder(std::vector<kernels::SparseVec>& parts, kernels::SparseVec* out) {
  kernels::SparseVec merged;
  for (size_t width = 1; width < parts.size(); width *= 2) {
    for (size_t i = 0; i + width < parts.size(); i += 2 * width) {
      kernels::MergeAdd(kernels::View(parts[i]), kernels::View(parts[i + width]), &merged);
      std::swap(parts[i], merged);
      parts[i + width] = {};
    }
  }
  *out = parts.empty() ? kernels::SparseVec{} : std::move(parts[0]);
}

}  // namespace

absl::Status GatherSumAlgorithm::LocalSelection(const CallContext&, const AllreduceOptions& options,
                                                LocalInput& in, ResidualLedger& ledger,
                                                CallStats* stats) {
  mine_.clear();
  Select(in, options, ledger, stats, &mine_);
  stats->details["local_selected"] = static_cast<double>(mine_.nnz());
  return absl::OkStatus();
}

absl::Status GatherSumAlgorithm::Exchange(const CallContext& ctx, const AllreduceOptions& options,
                                          std::span<float> acc, ResidualLedger&,
                                          AllreduceResult* result, CallStats* stats) {
  const int world = ctx.transport->size();
  const int rank = ctx.transport->rank();
  const size_t n = acc.size();
  kernels::SparseVec mine = std::move(mine_);
  mine_ = {};
  const uint32_t capacity = static_cast<uint32_t>(Capacity(n, options));
  Link link(ctx, id(), &stats->phases);
  Group all;
  for (int r = 0; r < world; ++r) all.ranks.push_back(r);
  all.me = rank;
  const std::vector<wire::ExpectedBlock> expect(world, {{0, static_cast<uint32_t>(n)}, capacity});
  std::vector<kernels::SparseVec> parts;
  absl::Status st =
      BruckAllGather(link, all, expect, kPhaseAllGather, &stats->phases, std::move(mine), &parts);
  // A dense frame carries no count: hold its nonzeros to the capacity too.
  for (int r = 0; st.ok() && r < world; ++r) {
    if (parts[r].nnz() > capacity) {
      st = absl::DataLossError(absl::StrCat("rank ", r, " selected ", parts[r].nnz(),
                                            " entries, more than the capacity ", capacity));
    }
  }
  if (!st.ok()) return st;
  {
    PhaseTimer t(&stats->phases.reduction_s);  // nothing is discarded after the selection
    result->is_dense = false;
    result->dense.clear();
    SumInFixedOrder(parts, &result->sparse);
    DropZeros(&result->sparse);
  }
  stats->result_nnz = result->sparse.nnz();
  stats->result_capacity = std::min(n, static_cast<size_t>(world) * capacity);
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms
