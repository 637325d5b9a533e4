#include "collectives/algorithms/oktopk/oktopk_select.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "kernels/topk_step.h"

namespace gradex::collectives::algorithms::oktopk {
namespace {

constexpr uint32_t kInfKey = 0x7f800000u;  // keys above it are NaN: never selected

float KeyToFloat(uint32_t key) {
  float f;
  std::memcpy(&f, &key, sizeof f);
  return f;
}

bool Selectable(uint32_t key) { return key != 0 && key <= kInfKey; }

// Keeps the entries of `in` with key >= `key` (NaN never).
void KeepAtOrAbove(const kernels::SparseVec& in, uint32_t key, kernels::SparseVec* out) {
  out->clear();
  for (size_t i = 0; i < in.nnz(); ++i) {
    const uint32_t k = kernels::MagnitudeKey(in.val[i]);
    if (Selectable(k) && k >= key) {
      out->idx.push_back(in.idx[i]);
      out->val.push_back(in.val[i]);
    }
  }
}

// Distributed radix select of the K largest magnitudes over every rank's
// `reduced`: three passes over 11, 11 and 9 key bits, each an all-gather of
// this rank's histogram (the per-rank histograms also give every rank's
// count above the threshold and its ties). Ties at the threshold go to the
// lower ranks first (lower indices: regions ascend with the rank), and within
// a rank to the lower indices, as in every top-k of gradex.
absl::Status ExactGlobalTopK(Link& link, const kernels::SparseVec& reduced, size_t want,
                             PhaseTimes* times, WireCount* wire, kernels::SparseVec* selected,
                             std::vector<uint32_t>* counts, uint32_t* threshold_key) {
  const int p = link.size(), me = link.rank();
  counts->assign(p, 0);
  selected->clear();
  *threshold_key = 0;
  if (want == 0) return absl::OkStatus();
  struct Pass {
    int shift, bits;
  };
  constexpr Pass kPasses[3] = {{20, 11}, {9, 11}, {0, 9}};
  std::vector<uint32_t> keys(reduced.nnz());
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = kernels::MagnitudeKey(reduced.val[i]);
  uint32_t prefix = 0, decided = 0;
  uint64_t need = want;
  std::vector<uint64_t> above(p, 0);
  std::vector<uint32_t> ties(p, 0);
  for (int pass = 0; pass < 3; ++pass) {
    const uint32_t mask = (1u << kPasses[pass].bits) - 1;
    const int shift = kPasses[pass].shift;
    std::vector<uint32_t> hist(mask + 1, 0);
    for (uint32_t key : keys) {
      if (Selectable(key) && (key & decided) == prefix) ++hist[(key >> shift) & mask];
    }
    auto all = AllGatherWords(link, hist, kOkPhaseHistogram, 32 * pass, times, wire);
    if (!all.ok()) return all.status();
    int chosen = -1;
    uint64_t cum = 0;
    for (int b = static_cast<int>(mask); b >= 0; --b) {
      uint64_t total = 0;
      for (int j = 0; j < p; ++j) total += (*all)[j][b];
      if (cum + total >= need) {
        chosen = b;
        break;
      }
      cum += total;
    }
    if (chosen < 0) {
      return absl::DataLossError(absl::StrCat("rank ", me, ": global histograms hold fewer than ",
                                              need, " entries (pass ", pass, ")"));
    }
    need -= cum;
    for (int j = 0; j < p; ++j) {
      for (uint32_t b = chosen + 1; b <= mask; ++b) above[j] += (*all)[j][b];
      if (pass == 2) ties[j] = (*all)[j][chosen];
    }
    prefix |= static_cast<uint32_t>(chosen) << shift;
    decided |= mask << shift;
  }
  *threshold_key = prefix;
  uint64_t take_me = 0;
  for (int j = 0; j < p; ++j) {
    const uint64_t take = std::min<uint64_t>(ties[j], need);
    need -= take;
    (*counts)[j] = static_cast<uint32_t>(above[j] + take);
    if (j == me) take_me = take;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!Selectable(keys[i]) || keys[i] < prefix) continue;
    if (keys[i] == prefix) {
      if (take_me == 0) continue;
      --take_me;
    }
    selected->idx.push_back(reduced.idx[i]);
    selected->val.push_back(reduced.val[i]);
  }
  return absl::OkStatus();
}

}  // namespace

void SelectLocal(LocalInput& in, size_t k, bool keep_all, bool exact_due, ThresholdController& ctl,
                 kernels::SparseVec* out, SelectInfo* info) {
  const size_t n = in.size();
  out->clear();
  *info = {};
  if (keep_all) {
    const std::span<float> acc = in.Accumulated();
    kernels::CompactAbove(acc.data(), n, 0.0f, 0, out);
    info->exact = true;
    return;
  }
  // The kernels add the gradient inside their first pass when it is still
  // due (LocalInput) and report the non-finite entries they leave.
  const std::span<float> x = in.target();
  auto exact = [&](float used, size_t count) {
    out->clear();
    size_t nonfinite = 0;
    kernels::SelectTopKStep(x.data(), n, k, 0, in.pending(), nullptr, /*zero_selected=*/false, out,
                            &nonfinite);
    in.Fused(nonfinite);
    // The k-th magnitude is the smallest selected one.
    uint32_t kth = ~0u;
    for (float v : out->val) kth = std::min(kth, kernels::MagnitudeKey(v));
    info->exact = true;
    info->threshold = out->nnz() > 0 ? KeyToFloat(kth) : 0.0f;
    ctl.Observe(used, count, k, info->threshold);
  };
  if (exact_due || !ctl.valid()) return exact(0, 0);
  const float used = ctl.threshold();
  // The compaction's buffer stays O(k): a threshold that lets far more
  // through (a miss the band below handles anyway) compacts a second time.
  const size_t cap = std::min(n, 4 * BandHigh(k) + 4096);
  size_t nonfinite = 0;
  size_t c = kernels::CompactAboveStep(x.data(), n, in.pending(), used, 0, cap, out, &nonfinite);
  in.Fused(nonfinite);
  if (c > cap) {
    out->clear();
    c = kernels::CompactAbove(x.data(), n, used, 0, out);
  }
  info->reuse_count = c;
  info->threshold = used;
  if (ctl.rule() == ThresholdRule::kAuthors) return ctl.Observe(used, c, k, 0);
  if (c > BandHigh(k)) {
    // The exact top-k lies among the candidates: select it there (O(c)).
    kernels::SparseVec kept;
    kernels::SparseTopK(kernels::View(*out), k, &kept, nullptr);
    uint32_t kth = ~0u;
    for (float v : kept.val) kth = std::min(kth, kernels::MagnitudeKey(v));
    *out = std::move(kept);
    info->exact = info->fell_back = true;
    info->threshold = out->nnz() > 0 ? KeyToFloat(kth) : 0.0f;
    return ctl.Observe(used, c, k, info->threshold);
  }
  if (c < BandLow(k)) {
    info->fell_back = true;
    return exact(used, c);
  }
  ctl.Observe(used, c, k, 0);
}

absl::Status SelectGlobal(Link& link, const kernels::SparseVec& reduced, uint32_t zeros, size_t k,
                          bool keep_all, bool exact_due, ThresholdController& ctl,
                          PhaseTimes* times, WireCount* wire, kernels::SparseVec* selected,
                          std::vector<uint32_t>* counts, std::vector<uint32_t>* zero_counts,
                          SelectInfo* info) {
  const int p = link.size();
  *info = {};
  const bool counting = !keep_all && !exact_due && ctl.valid();
  const float used = counting ? ctl.threshold() : 0.0f;
  const uint32_t used_key = kernels::MagnitudeKey(used);
  uint32_t at_or_above = 0, avail = 0;
  for (float v : reduced.val) {
    const uint32_t key = kernels::MagnitudeKey(v);
    if (!Selectable(key)) continue;
    ++avail;
    at_or_above += counting && key >= used_key;
  }
  // Buffer sizes (the paper's all-gather before balancing), carrying what the
  // exact/reuse decision needs so that every rank takes the same branch.
  const uint32_t words[4] = {at_or_above, avail, zeros, ctl.valid() ? 0u : 1u};
  auto all = AllGatherWords(link, words, kOkPhaseCounts, 0, times, wire);
  if (!all.ok()) return all.status();
  uint64_t total = 0, total_avail = 0;
  bool any_invalid = false;
  counts->assign(p, 0);
  zero_counts->assign(p, 0);
  for (int j = 0; j < p; ++j) {
    total += (*all)[j][0];
    total_avail += (*all)[j][1];
    (*zero_counts)[j] = (*all)[j][2];
    any_invalid |= (*all)[j][3] != 0;
  }
  info->reuse_count = total;
  if (keep_all) {
    KeepAtOrAbove(reduced, 1, selected);
    for (int j = 0; j < p; ++j) (*counts)[j] = (*all)[j][1];
    info->exact = true;
    return absl::OkStatus();
  }
  bool exact = !counting || any_invalid;
  if (!exact && ctl.rule() == ThresholdRule::kTracking) {
    const uint64_t low = std::min<uint64_t>(BandLow(k), total_avail);
    exact = info->fell_back = total < low || total > BandHigh(k);
  }
  if (!exact) {
    info->threshold = used;
    KeepAtOrAbove(reduced, used_key, selected);
    for (int j = 0; j < p; ++j) (*counts)[j] = (*all)[j][0];
    ctl.Observe(used, total, k, 0);
    return absl::OkStatus();
  }
  info->exact = true;
  uint32_t key = 0;
  const size_t want = std::min<uint64_t>(k, total_avail);
  absl::Status st = ExactGlobalTopK(link, reduced, want, times, wire, selected, counts, &key);
  if (!st.ok()) return st;
  info->threshold = want > 0 && want < total_avail ? KeyToFloat(key) : 0.0f;
  ctl.Observe(used, total, k, want > 0 ? KeyToFloat(key) : 0.0f);
  return absl::OkStatus();
}

}  // namespace gradex::collectives::algorithms::oktopk
