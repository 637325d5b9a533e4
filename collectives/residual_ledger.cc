#include "collectives/residual_ledger.h"

namespace gradex {

absl::Status ResidualLedger::Commit() {
  absl::Status status;
  for (auto& [d, scale] : discarded_) {
    if (memory_ == nullptr) {
      kernels::ScatterAdd(kernels::View(d), 0, scale, acc_.data());
    } else if (absl::Status s = memory_->ScatterAdd(d, 0, scale, acc_); !s.ok() && status.ok()) {
      status = s;
    }
  }
  discarded_.clear();
  return status;
}

absl::Status ResidualLedger::Restore() {
  absl::Status status;
  for (const kernels::SparseVec& s : selected_) {
    if (memory_ == nullptr) {
      kernels::ScatterAdd(kernels::View(s), 0, 1.0f, acc_.data());
    } else if (absl::Status e = memory_->ScatterAdd(s, 0, 1.0f, acc_); !e.ok() && status.ok()) {
      status = e;
    }
  }
  selected_.clear();
  discarded_.clear();
  return status;
}

}  // namespace gradex
