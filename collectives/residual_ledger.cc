#include "collectives/residual_ledger.h"

namespace gradex {

void ResidualLedger::Commit() {
  for (auto& [d, scale] : discarded_) kernels::ScatterAdd(kernels::View(d), 0, scale, acc_.data());
  discarded_.clear();
}

void ResidualLedger::Restore() {
  for (const kernels::SparseVec& s : selected_) {
    kernels::ScatterAdd(kernels::View(s), 0, 1.0f, acc_.data());
  }
  selected_.clear();
  discarded_.clear();
}

}  // namespace gradex
