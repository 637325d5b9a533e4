#include "collectives/algorithms/oktopk/oktopk_regions.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gradex::collectives::algorithms::oktopk {

Boundaries EqualBoundaries(size_t n, int parts) {
  Boundaries b(parts + 1);
  for (int j = 0; j <= parts; ++j) b[j] = static_cast<uint32_t>(n * j / parts);
  return b;
}

std::vector<uint32_t> ProposeBoundaries(const kernels::SparseVec& local, size_t n, int parts) {
  const size_t m = local.nnz();
  std::vector<uint32_t> inner(parts - 1);
  for (int j = 1; j < parts; ++j) {
    inner[j - 1] = m == 0 ? static_cast<uint32_t>(n * j / parts) : local.idx[m * j / parts];
  }
  return inner;
}

void SplitByRegions(const kernels::SparseVec& sel, const Boundaries& b,
                    std::vector<kernels::SparseVec>* parts) {
  const int p = static_cast<int>(b.size()) - 1;
  parts->assign(p, {});
  size_t at = 0;
  for (int j = 0; j < p; ++j) {
    const size_t end =
        std::lower_bound(sel.idx.begin() + at, sel.idx.end(), b[j + 1]) - sel.idx.begin();
    (*parts)[j].idx.assign(sel.idx.begin() + at, sel.idx.begin() + end);
    (*parts)[j].val.assign(sel.val.begin() + at, sel.val.begin() + end);
    at = end;
  }
}

absl::StatusOr<Boundaries> MeanBoundaryAgreement::Agree(Link& link,
                                                        std::span<const uint32_t> proposal,
                                                        size_t n, PhaseTimes* times,
                                                        WireCount* wire) {
  const int p = link.size();
  auto all = AllGatherWords(link, proposal, kOkPhaseBoundaries, 0, times, wire);
  if (!all.ok()) return all.status();
  std::vector<uint64_t> sum(p - 1, 0);
  for (int r = 0; r < p; ++r) {
    const std::vector<uint32_t>& v = (*all)[r];
    for (int j = 0; j + 1 < p; ++j) {
      if (v[j] > n || (j > 0 && v[j] < v[j - 1])) {
        return absl::DataLossError(absl::StrCat("rank ", link.rank(),
                                                ": boundary proposal of rank ", r,
                                                " is not nondecreasing within [0, ", n, "]"));
      }
      sum[j] += v[j];
    }
  }
  Boundaries b(p + 1);
  b[0] = 0;
  b[p] = static_cast<uint32_t>(n);
  // The mean of nondecreasing sequences is nondecreasing.
  for (int j = 1; j < p; ++j) b[j] = static_cast<uint32_t>(sum[j - 1] / p);
  return b;
}

}  // namespace gradex::collectives::algorithms::oktopk
