#include "collectives/local_topk.h"

#include <algorithm>

#include "collectives/phase_timer.h"

namespace gradex::collectives {

uint64_t LocalTopK::hits() const {
  uint64_t h = 0;
  for (const auto& r : reuse_) h += r.hits;
  return h;
}

uint64_t LocalTopK::misses() const {
  uint64_t m = 0;
  for (const auto& r : reuse_) m += r.misses();
  return m;
}

void LocalTopK::Report(uint64_t hits_before, uint64_t misses_before, CallStats* stats) const {
  uint64_t candidates = 0;
  for (const auto& r : reuse_) candidates += r.last_candidates;
  stats->details["topk_reuse_hits"] += static_cast<double>(hits() - hits_before);
  stats->details["topk_reuse_misses"] += static_cast<double>(misses() - misses_before);
  stats->details["topk_reuse_candidates"] = static_cast<double>(candidates);
}

void LocalTopK::Select(LocalInput& in, size_t k, bool reuse, ResidualLedger& ledger,
                       CallStats* stats, kernels::SparseVec* out) {
  const uint64_t h0 = hits(), m0 = misses();
  {
    PhaseTimer t(&stats->phases.selection_s);
    out->clear();
    if (reuse_.size() != 1) reuse_.assign(1, kernels::ThresholdReuse{});
    if (ResidualMemory* memory = in.memory(); memory != nullptr) {
      // Not host memory: the same fused step where x lives; only the k
      // entries come back.
      const std::span<float> x = in.target();
      size_t nonfinite = 0;
      if (absl::Status s = memory->SelectTopK(x, k, 0, in.pending(), reuse ? &reuse_[0] : nullptr,
                                              out, &nonfinite);
          !s.ok()) {
        in.Failed(std::move(s));
      }
      in.Fused(nonfinite);
      ledger.Selected(*out);
      if (reuse) Report(h0, m0, stats);
      return;
    }
    const std::span<float> x = in.target();
    size_t nonfinite = 0;
    kernels::SelectTopKStep(x.data(), x.size(), k, 0, in.pending(), reuse ? &reuse_[0] : nullptr,
                            /*zero_selected=*/true, out, &nonfinite);
    in.Fused(nonfinite);
    ledger.Selected(*out);
  }
  if (reuse) Report(h0, m0, stats);
}

void LocalTopK::SelectBlocks(LocalInput& in, const std::vector<size_t>& bounds,
                             const std::vector<size_t>& keeps, bool reuse, ResidualLedger& ledger,
                             CallStats* stats, std::vector<kernels::SparseVec>* out) {
  // The fused kernel accumulates only inside the blocks.
  if (bounds.empty() || bounds.front() != 0 || bounds.back() != in.size()) in.Accumulated();
  const uint64_t h0 = hits(), m0 = misses();
  if (ResidualMemory* memory = in.memory(); memory != nullptr) {
    // BlockTopKStep's blocks where the bucket lives, all in one host round
    // trip (the blocks cover x, so every entry is accumulated once).
    PhaseTimer t(&stats->phases.selection_s);
    size_t nonfinite = 0;
    if (absl::Status s = memory->SelectTopKBlocks(in.target(), bounds, keeps, in.pending(),
                                                  reuse ? &reuse_ : nullptr, out, &nonfinite);
        !s.ok()) {
      in.Failed(std::move(s));
    }
    in.Fused(nonfinite);
    for (const auto& b : *out) ledger.Selected(b);
  } else {
    PhaseTimer t(&stats->phases.selection_s);
    const std::span<float> x = in.target();
    size_t nonfinite = 0;
    kernels::BlockTopKStep(x.data(), bounds, keeps, 0, in.pending(), reuse ? &reuse_ : nullptr,
                           /*zero_selected=*/true, out, &nonfinite);
    in.Fused(nonfinite);
    for (const auto& b : *out) ledger.Selected(b);
  }
  if (reuse) Report(h0, m0, stats);
}

}  // namespace gradex::collectives
