// The DGS server shard's pushes: checked (worker, version, staleness, ratio,
// indices, values), then added to M and to each joined worker's M - v, with
// the overflow checks when the sums near float's maximum.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/sparse.h"
#include "ps/dgs_dense.h"
#include "ps/dgs_server_shard.h"

namespace gradex::ps {
namespace {

// The bound after adding values of at most `largest` in magnitude: float
// rounding may put a sum up to 2^-24 above the exact one, hence the margin.
double GrownBound(double bound, float largest) { return (bound + largest) * (1.0 + 0x1p-23); }

}  // namespace

absl::Status DgsServerShard::ApplyPush(uint32_t worker, const DgsMessage& push, DgsRefusal* why) {
  if (why != nullptr) *why = DgsRefusal::kNone;
  if (worker >= options_.workers || push.worker != worker) {
    return Refuse(DgsRefusal::kWrongWorker, absl::StrCat("worker ", push.worker, " as ", worker),
                  why);
  }
  if (push.kind != DgsKind::kPush && push.kind != DgsKind::kDensePush) {
    return Refuse(DgsRefusal::kWrongKind, absl::StrCat("kind ", static_cast<int>(push.kind)), why);
  }
  if (push.shard != shard_) {
    return Refuse(DgsRefusal::kWrongShard, absl::StrCat("shard ", push.shard), why);
  }
  if (!active_[worker]) {
    return Refuse(DgsRefusal::kNotJoined, absl::StrCat("worker ", worker, " has not said hello"),
                  why);
  }
  if (push.version > version_) {
    return Refuse(DgsRefusal::kVersionAhead,
                  absl::StrCat("base version ", push.version, " > ", version_), why);
  }
  if (push.version != pulled_at_[worker]) {
    return Refuse(DgsRefusal::kStaleVersion,
                  absl::StrCat("base version ", push.version, ", last sent to worker ", worker,
                               ": ", pulled_at_[worker]),
                  why);
  }
  if (version_ - push.version > options_.max_staleness) {
    return Refuse(DgsRefusal::kBeyondStaleness,
                  absl::StrCat(version_ - push.version, " versions behind > max_staleness ",
                               options_.max_staleness),
                  why);
  }
  if (!(push.ratio > 0.0f && push.ratio <= 1.0f)) {
    return Refuse(DgsRefusal::kBadRatio, absl::StrCat("ratio ", push.ratio), why);
  }
  if (push.kind == DgsKind::kDensePush) return ApplyDense(worker, push, why);
  const kernels::SparseVec& s = push.sparse;
  if (s.val.size() != s.idx.size()) return Refuse(DgsRefusal::kBadLength, "indices != values", why);
  float largest = 0;
  for (size_t e = 0; e < s.nnz(); ++e) {
    if (s.idx[e] < range_.begin || s.idx[e] >= range_.end) {
      return Refuse(DgsRefusal::kIndexOutOfRange, absl::StrCat("index ", s.idx[e]), why);
    }
    if (e > 0 && s.idx[e] <= s.idx[e - 1]) {
      return Refuse(DgsRefusal::kUnsortedIndices, absl::StrCat("index ", s.idx[e]), why);
    }
    if (!std::isfinite(s.val[e]))
      return Refuse(DgsRefusal::kNonFinite, absl::StrCat("entry ", e), why);
    largest = std::max(largest, std::fabs(s.val[e]));
  }
  const bool near_max = bound_ + largest > std::numeric_limits<float>::max();
  if (near_max) {
    if (absl::Status st = CheckSums(s.idx, s.val, why); !st.ok()) return st;
  }
  float* m = m_.data() - range_.begin;
  for (size_t e = 0; e < s.nnz(); ++e) m[s.idx[e]] += s.val[e];
  // M − v_j grows by the push for every joined worker j (the pusher too:
  // its own push comes back to it through its pull, as in the seed).
  for (uint32_t j = 0; j < options_.workers; ++j) {
    if (!active_[j]) continue;
    float* d = d_[j].data() - range_.begin;
    for (size_t e = 0; e < s.nnz(); ++e) d[s.idx[e]] += s.val[e];
  }
  bound_ = near_max ? ExactBound() : GrownBound(bound_, largest);
  Applied(worker, push, s.nnz());
  return absl::OkStatus();
}

absl::Status DgsServerShard::ApplyDense(uint32_t worker, const DgsMessage& push, DgsRefusal* why) {
  // R = 1 (ASGD): one pass over M and one over each joined d_j, adding
  // only nonzeros (dgs_dense.h), the same bits as the sparse route.
  if (push.ratio != 1.0f) {
    return Refuse(DgsRefusal::kBadRatio, absl::StrCat("dense push at ratio ", push.ratio), why);
  }
  const std::vector<float>& v = push.dense;
  if (v.size() != range_.size()) {
    return Refuse(DgsRefusal::kBadLength,
                  absl::StrCat(v.size(), " values for a range of ", range_.size()), why);
  }
  bool finite = true;  // no early exit: one branch-free pass
  float largest = 0;
  for (float x : v) {
    finite &= std::isfinite(x);
    largest = std::max(largest, std::fabs(x));
  }
  if (!finite) return Refuse(DgsRefusal::kNonFinite, "a dense push's values", why);
  const bool near_max = bound_ + largest > std::numeric_limits<float>::max();
  if (near_max) {
    if (absl::Status st = CheckSums({}, v, why); !st.ok()) return st;
  }
  const uint64_t n = DgsAddNonzeros(m_.data(), v.data(), v.size());
  for (uint32_t j = 0; j < options_.workers; ++j) {
    if (active_[j]) DgsAddNonzeros(d_[j].data(), v.data(), v.size());
  }
  bound_ = near_max ? ExactBound() : GrownBound(bound_, largest);
  Applied(worker, push, n);
  return absl::OkStatus();
}

absl::Status DgsServerShard::CheckSums(std::span<const uint32_t> ids, std::span<const float> values,
                                       DgsRefusal* why) {
  auto check = [&](const std::vector<float>& a, const char* what, uint32_t j) -> absl::Status {
    for (size_t e = 0; e < values.size(); ++e) {
      const size_t at = ids.empty() ? e : ids[e] - range_.begin;
      if (!std::isfinite(a[at] + values[e])) {
        return Refuse(DgsRefusal::kOverflow,
                      absl::StrCat("element ", range_.begin + at, ": ", what,
                                   j == UINT32_MAX ? "" : absl::StrCat(" of worker ", j), " ",
                                   a[at], " + ", values[e], " is not finite"),
                      why);
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status st = check(m_, "M", UINT32_MAX); !st.ok()) return st;
  for (uint32_t j = 0; j < options_.workers; ++j) {
    if (!active_[j]) continue;
    if (absl::Status st = check(d_[j], "M - v", j); !st.ok()) return st;
  }
  return absl::OkStatus();
}

double DgsServerShard::ExactBound() const {
  float b = 0;
  for (float x : m_) b = std::max(b, std::fabs(x));
  for (uint32_t j = 0; j < options_.workers; ++j) {
    if (!active_[j]) continue;
    for (float x : d_[j]) b = std::max(b, std::fabs(x));
  }
  return b;
}

void DgsServerShard::Applied(uint32_t worker, const DgsMessage& push, uint64_t entries) {
  push_staleness_[worker] = version_ - push.version;
  ratio_[worker] = push.ratio;
  ++version_;
  ++stats_.pushes;
  stats_.pushed_entries += entries;
}

}  // namespace gradex::ps
