#include "collectives/residual_ledger.h"

#include <algorithm>

namespace gradex {

void ResidualLedger::SendHomeUndelivered(const kernels::SparseVec& result) {
  std::vector<uint32_t> delivered(result.idx.begin(), result.idx.end());
  std::sort(delivered.begin(), delivered.end());
  auto in_result = [&](uint32_t i) {
    return std::binary_search(delivered.begin(), delivered.end(), i);
  };
  for (auto& [d, scale] : discarded_) {
    size_t j = 0;
    for (size_t i = 0; i < d.nnz(); ++i) {
      if (!in_result(d.idx[i])) continue;
      d.idx[j] = d.idx[i];
      d.val[j++] = d.val[i];
    }
    d.idx.resize(j);
    d.val.resize(j);
  }
  for (const kernels::SparseVec& s : selected_) {
    kernels::SparseVec home;
    for (size_t i = 0; i < s.nnz(); ++i) {
      if (in_result(s.idx[i])) continue;
      home.idx.push_back(s.idx[i]);
      home.val.push_back(s.val[i]);
    }
    Discarded(std::move(home), 1.0f);
  }
}

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
