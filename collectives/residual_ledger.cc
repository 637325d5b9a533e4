#include "collectives/residual_ledger.h"

#include <cstdint>
#include <vector>

namespace gradex::collectives {

void ResidualLedger::SendHomeUndelivered(const kernels::SparseVec& result) {
  // A bit per element: n / 8 bytes, cheaper than sorting the result and
  // searching it for every selected and discarded entry.
  std::vector<uint64_t> delivered((acc_.size() + 63) / 64, 0);
  for (uint32_t i : result.idx) {
    if (i < acc_.size()) delivered[i >> 6] |= uint64_t{1} << (i & 63);
  }
  auto in_result = [&](uint32_t i) {
    return i < acc_.size() && (delivered[i >> 6] >> (i & 63) & 1) != 0;
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

}  // namespace gradex::collectives
