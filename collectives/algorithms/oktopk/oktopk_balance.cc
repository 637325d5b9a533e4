#include "collectives/algorithms/oktopk/oktopk_balance.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/sparse_steps.h"
#include "collectives/phase_timer.h"

namespace gradex::collectives::algorithms::oktopk {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

// Positions of the concatenated selection: rank j holds [off[j], off[j+1]),
// slice s is [lo(s), lo(s+1)) with lo(s) = total * s / P.
struct Layout {
  std::vector<uint64_t> off;
  uint64_t total = 0;
  int p = 0;
  explicit Layout(const std::vector<uint32_t>& counts) : p(static_cast<int>(counts.size())) {
    off.assign(p + 1, 0);
    for (int j = 0; j < p; ++j) off[j + 1] = off[j] + counts[j];
    total = off[p];
  }
  uint64_t lo(int s) const { return total * s / p; }
  // The part of rank j's buffer that belongs to slice s, as positions in j's buffer.
  std::pair<uint64_t, uint64_t> Piece(int j, int s) const {
    const uint64_t a = std::max(off[j], lo(s)), b = std::min(off[j + 1], lo(s + 1));
    return a < b ? std::make_pair(a - off[j], b - off[j])
                 : std::make_pair(uint64_t{0}, uint64_t{0});
  }
  // Index range of slice s: the regions whose buffers overlap it.
  wire::BlockRange SliceRange(int s, const Boundaries& bounds) const {
    int first = -1, last = -1;
    for (int j = 0; j < p; ++j) {
      auto [a, b] = Piece(j, s);
      if (b > a) {
        if (first < 0) first = j;
        last = j;
      }
    }
    return first < 0 ? wire::BlockRange{0, 0} : wire::BlockRange{bounds[first], bounds[last + 1]};
  }
};

kernels::SparseVec Sub(const kernels::SparseVec& v, uint64_t a, uint64_t b) {
  kernels::SparseVec s;
  s.idx.assign(v.idx.begin() + a, v.idx.begin() + b);
  s.val.assign(v.val.begin() + a, v.val.begin() + b);
  return s;
}

absl::Status CountMismatch(int me, const char* what, int from, size_t got, uint64_t want) {
  return absl::DataLossError(absl::StrCat("rank ", me, ": ", what, " from rank ", from, " holds ",
                                          got, " entries, ", want, " announced"));
}

}  // namespace

bool NeedsBalancing(const std::vector<uint32_t>& counts) {
  uint64_t total = 0, most = 0;
  for (uint32_t c : counts) {
    total += c;
    most = std::max<uint64_t>(most, c);
  }
  return counts.size() > 1 && most * counts.size() > 4 * total;
}

absl::Status BalanceAndAllGather(Link& link, const Boundaries& bounds,
                                 const std::vector<uint32_t>& counts,
                                 const std::vector<uint32_t>& zero_counts,
                                 kernels::SparseVec selected, kernels::SparseVec cancelled,
                                 PhaseTimes* times, WireCount* wire, kernels::SparseVec* result,
                                 kernels::SparseVec* all_cancelled, bool* balanced) {
  const int p = link.size(), me = link.rank();
  if (selected.nnz() != counts[me] || cancelled.nnz() != zero_counts[me]) {
    return absl::InternalError("oktopk: own buffer differs from the announced sizes");
  }
  const Layout layout(counts);
  *balanced = NeedsBalancing(counts);
  std::vector<std::vector<wire::ExpectedBlock>> expect(p);
  kernels::SparseVec values;
  if (*balanced) {
    std::vector<kernels::SparseVec> pieces(p);
    AllToAllPlan plan{std::vector<bool>(p, false), std::vector<bool>(p, false),
                      std::vector<transport::Bytes>(p)};
    for (int d = 1; d < p; ++d) {
      auto [a, b] = layout.Piece(me, Mod(me + d, p));
      if (b > a) {
        plan.send[d] = true;
        AppendCounted(link.meta(kOkPhaseBalance), Region(bounds, me),
                      kernels::View(Sub(selected, a, b)), wire, &plan.out[d]);
      }
      auto [c, e] = layout.Piece(Mod(me - d, p), me);
      plan.recv[d] = e > c;
    }
    {
      auto [a, b] = layout.Piece(me, me);
      pieces[me] = Sub(selected, a, b);
    }
    std::vector<kernels::SparseVec> got;
    absl::Status st = RotatedAllToAll(
        link, kOkPhaseBalance, std::min(4, p), std::move(plan),
        [&](int d, const transport::Bytes& msg) -> absl::Status {
          const int j = Mod(me - d, p);
          auto [a, b] = layout.Piece(j, me);
          const wire::ExpectedBlock want{Region(bounds, j), static_cast<uint32_t>(b - a)};
          absl::Status s =
              DecodeCounted(msg, link.meta(kOkPhaseBalance, j), {&want, 1}, wire, &got);
          if (!s.ok()) return s;
          if (got[0].nnz() != b - a)
            return CountMismatch(me, "balance piece", j, got[0].nnz(), b - a);
          pieces[j] = std::move(got[0]);
          return absl::OkStatus();
        });
    if (!st.ok()) return st;
    ConcatBlocks(pieces, &values);
    for (int s = 0; s < p; ++s) {
      expect[s].push_back(
          {layout.SliceRange(s, bounds), static_cast<uint32_t>(layout.lo(s + 1) - layout.lo(s))});
    }
  } else {
    values = std::move(selected);
    for (int j = 0; j < p; ++j) expect[j].push_back({Region(bounds, j), counts[j]});
  }
  for (int j = 0; j < p; ++j) expect[j].push_back({Region(bounds, j), zero_counts[j]});
  std::vector<kernels::SparseVec> mine(2);
  mine[0] = std::move(values);
  mine[1] = std::move(cancelled);
  std::vector<std::vector<kernels::SparseVec>> all;
  absl::Status st =
      BruckAllGatherBlocks(link, expect, kOkPhaseAllGather, 0, times, wire, std::move(mine), &all);
  if (!st.ok()) return st;
  PhaseTimer t(&times->communication_s);
  std::vector<kernels::SparseVec> vals(p), zeros(p);
  for (int j = 0; j < p; ++j) {
    if (all[j][0].nnz() != expect[j][0].capacity) {
      return CountMismatch(me, "selected block", j, all[j][0].nnz(), expect[j][0].capacity);
    }
    if (all[j][1].nnz() != zero_counts[j]) {
      return CountMismatch(me, "cancelled block", j, all[j][1].nnz(), zero_counts[j]);
    }
    for (float v : all[j][1].val) {
      if (v != 1.0f) {
        return absl::DataLossError(absl::StrCat("rank ", me, ": cancelled-index marker ", v,
                                                " from rank ", j, " is not 1"));
      }
    }
    vals[j] = std::move(all[j][0]);
    zeros[j] = std::move(all[j][1]);
  }
  ConcatBlocks(vals, result);
  ConcatBlocks(zeros, all_cancelled);
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms::oktopk
