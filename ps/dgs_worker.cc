#include "ps/dgs_worker.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "ps/dgs_dense.h"

namespace gradex::ps {

DgsWorkerState::DgsWorkerState(const DgsLayout& layout, uint32_t worker,
                               std::vector<DgsRange> shards, const DgsWorkerOptions& options)
    : layout_(layout),
      worker_(worker),
      shards_(std::move(shards)),
      options_(options),
      // Exact reciprocal only for powers of two; elsewhere divide (the seed's
      // a / m), so that integer tests at m = 1/2 and real runs agree with it.
      exact_inverse_(std::exp2(std::round(std::log2(options.momentum))) == options.momentum),
      u_(layout.total(), 0.0f),
      joined_(shards_.size(), 0),
      versions_(shards_.size(), 0) {}

absl::StatusOr<DgsWorkerState> DgsWorkerState::Create(const DgsLayout& layout, uint32_t worker,
                                                      std::vector<DgsRange> shard_ranges,
                                                      const DgsWorkerOptions& o) {
  if (!(o.momentum > 0.0f && o.momentum <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("DGS momentum ", o.momentum, " not in (0, 1]"));
  }
  if (!(o.weight_decay >= 0.0f && std::isfinite(o.weight_decay))) {
    return absl::InvalidArgumentError(absl::StrCat("DGS weight_decay ", o.weight_decay, " < 0"));
  }
  if (!(o.density > 0.0f && o.density <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("DGS density ", o.density, " not in (0, 1]"));
  }
  if (!(o.lr0 >= 0.0f && std::isfinite(o.lr0))) {
    return absl::InvalidArgumentError(absl::StrCat("DGS lr0 ", o.lr0, " < 0"));
  }
  if (shard_ranges.empty() || shard_ranges.size() > kDgsMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS: ", shard_ranges.size(), " shards (1 .. ", kDgsMaxShards, ")"));
  }
  uint64_t at = 0;
  for (size_t s = 0; s < shard_ranges.size(); ++s) {
    if (shard_ranges[s].begin != at || shard_ranges[s].end <= shard_ranges[s].begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("DGS: shard ", s, " range [", shard_ranges[s].begin, ",",
                       shard_ranges[s].end, ") does not continue at ", at));
    }
    at = shard_ranges[s].end;
  }
  if (at != layout.total()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS: shards cover ", at, " of ", layout.total(), " elements"));
  }
  return DgsWorkerState(layout, worker, std::move(shard_ranges), o);
}

double DgsWorkerState::Ratio(float lr) const {
  if (options_.density >= 1.0f) return 1.0;
  const double lr0 = options_.lr0 > 0.0f ? options_.lr0 : lr;
  return std::min(1.0, double{options_.density} * double{lr} / lr0);
}

absl::Status DgsWorkerState::MakePush(std::span<const float> grad, std::span<const float> params,
                                      float lr, DgsPush* push) {
  if (grad.size() != u_.size() || params.size() != u_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DGS step: ", grad.size(), " gradients and ",
                                                   params.size(), " parameters for a model of ",
                                                   u_.size()));
  }
  if (!(lr > 0.0f && std::isfinite(lr))) {
    return absl::InvalidArgumentError(absl::StrCat("DGS step: lr ", lr, " not positive"));
  }
  const float m = options_.momentum, wd = options_.weight_decay, inv_m = 1.0f / m;
  const double ratio = Ratio(lr);  // lr0 not given: this first step's lr (set below)
  const bool dense = ratio >= 1.0;
  // a = m·u + lr·(g + wd·w) into the scratch buffer first: a NaN or Inf
  // there (from g, w or an overflow) refuses the step with u untouched. At
  // R = 1 (ASGD) the same pass writes the push: every nonzero is sent and
  // keeps u = a (zeros: a / m = a), as the top-k rule with k = size selects;
  // the change −a of the whole model (a zero is no entry), no indices.
  scratch_.resize(u_.size());
  if (dense) push->dense.resize(u_.size());
  {
    bool finite = true;
    uint64_t nonzeros = 0;
    const float* g = grad.data();
    const float* w = params.data();
    const float* u = u_.data();
    float* a = scratch_.data();
    float* out = push->dense.data();
    if (dense) {
      for (size_t i = 0; i < u_.size(); ++i) {
        a[i] = m * u[i] + lr * (g[i] + wd * w[i]);
        finite &= std::isfinite(a[i]);
        out[i] = -a[i];
        nonzeros += a[i] != 0.0f;
      }
    } else {
      for (size_t i = 0; i < u_.size(); ++i) {
        a[i] = m * u[i] + lr * (g[i] + wd * w[i]);
        finite &= std::isfinite(a[i]);
      }
    }
    if (!finite) {
      return absl::InvalidArgumentError("DGS step: a NaN or Inf gradient, parameter or velocity");
    }
    push->nnz = nonzeros;
  }
  u_.swap(scratch_);
  if (options_.lr0 == 0.0f) options_.lr0 = lr;  // R scales with lr / the first lr
  push->ratio = static_cast<float>(ratio);
  push->entries.clear();
  push->is_dense = dense;
  if (dense) return absl::OkStatus();
  push->dense.clear();
  for (uint32_t j = 0; j < layout_.layers(); ++j) {
    const DgsRange l = layout_.layer(j);
    float* a = u_.data() + l.begin;
    const size_t first = push->entries.nnz();
    const uint32_t keep = DgsKeep(l.size(), ratio);
    if (keep == l.size()) {
      // The whole layer is selected (a small layer): every nonzero, in one
      // pass, u = a kept (the select and the a / m pass would give the same).
      for (uint32_t i = 0; i < l.size(); ++i) {
        if (a[i] == 0.0f) continue;
        push->entries.idx.push_back(l.begin + i);
        push->entries.val.push_back(-a[i]);
      }
      continue;
    }
    kernels::SelectTopK(a, l.size(), keep, l.begin, &push->entries);
    // Unsent entries: a / m (SAMomentum); sent ones keep a as the velocity.
    if (m != 1.0f) {
      if (exact_inverse_) {
        for (uint32_t i = 0; i < l.size(); ++i) a[i] *= inv_m;
      } else {
        for (uint32_t i = 0; i < l.size(); ++i) a[i] /= m;
      }
      for (size_t e = first; e < push->entries.nnz(); ++e) {
        u_[push->entries.idx[e]] = push->entries.val[e];
      }
    }
    // What goes to the server is the change of the parameters: θ ← θ − g.
    for (size_t e = first; e < push->entries.nnz(); ++e) {
      push->entries.val[e] = -push->entries.val[e];
    }
  }
  push->nnz = push->entries.nnz();
  return absl::OkStatus();
}

float DgsWorkerState::Unsent(float a) const {
  return exact_inverse_ ? a * (1.0f / options_.momentum) : a / options_.momentum;
}

uint64_t DgsWorkerState::Unsend(uint32_t shard, const DgsPush& push) {
  if (shard >= shards_.size()) return 0;
  const DgsRange r = shards_[shard];
  const bool divide = options_.momentum != 1.0f;  // at m = 1 sent and unsent both keep a
  if (push.is_dense) {
    if (push.dense.size() != u_.size()) return 0;
    uint64_t n = 0;
    for (uint32_t i = r.begin; i < r.end; ++i) {
      n += push.dense[i] != 0.0f;
      if (divide) u_[i] = Unsent(u_[i]);
    }
    return n;
  }
  const auto& idx = push.entries.idx;
  auto lo = std::lower_bound(idx.begin(), idx.end(), r.begin);
  auto hi = std::lower_bound(lo, idx.end(), r.end);
  if (divide) {
    for (auto it = lo; it != hi; ++it) u_[*it] = Unsent(u_[*it]);
  }
  return static_cast<uint64_t>(hi - lo);
}

kernels::SparseVec DgsPushEntries(const DgsPush& push) {
  if (!push.is_dense) return push.entries;
  kernels::SparseVec e;
  for (size_t i = 0; i < push.dense.size(); ++i) {
    if (push.dense[i] == 0.0f) continue;
    e.idx.push_back(static_cast<uint32_t>(i));
    e.val.push_back(push.dense[i]);
  }
  return e;
}

absl::Status DgsWorkerState::ApplyPull(uint32_t shard, const DgsMessage& pull,
                                       std::span<float> params, uint64_t* entries) {
  if (entries != nullptr) *entries = 0;
  if (shard >= shards_.size() || pull.shard != shard || pull.worker != worker_) {
    return absl::FailedPreconditionError(absl::StrCat("DGS worker ", worker_, ": a reply of shard ",
                                                      pull.shard, " for worker ", pull.worker,
                                                      " taken as shard ", shard, "'s"));
  }
  if (params.size() != u_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS pull: ", params.size(), " parameters for a model of ", u_.size()));
  }
  const DgsRange r = shards_[shard];
  if (pull.kind == DgsKind::kRefused) {
    joined_[shard] = false;
    return absl::FailedPreconditionError(absl::StrCat("DGS shard ", shard, " refused worker ",
                                                      worker_, ": ",
                                                      std::string(DgsRefusalName(pull.reason))));
  }
  if (joined_[shard] && pull.version < versions_[shard]) {
    return absl::FailedPreconditionError(absl::StrCat("DGS shard ", shard, ": a reply at version ",
                                                      pull.version, " after version ",
                                                      versions_[shard]));
  }
  if (pull.kind == DgsKind::kFullSync) {
    if (pull.dense.size() != r.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DGS shard ", shard, ": a full sync of ", pull.dense.size(), " values for ", r.size()));
    }
    std::memcpy(params.data() + r.begin, pull.dense.data(), r.size() * sizeof(float));
    joined_[shard] = true;
    versions_[shard] = pull.version;
    return absl::OkStatus();
  }
  if (pull.kind == DgsKind::kDensePull && joined_[shard]) {
    if (pull.dense.size() != r.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "DGS shard ", shard, ": a dense pull of ", pull.dense.size(), " values for ", r.size()));
    }
    const uint64_t n = DgsAddNonzeros(params.data() + r.begin, pull.dense.data(), r.size());
    if (entries != nullptr) *entries = n;
    versions_[shard] = pull.version;
    return absl::OkStatus();
  }
  if (pull.kind != DgsKind::kPull || !joined_[shard]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DGS shard ", shard, ": a ", static_cast<int>(pull.kind), " reply before a full sync"));
  }
  const kernels::SparseVec& s = pull.sparse;
  if (s.val.size() != s.idx.size() ||
      !kernels::IsSortedUniqueInRange(s.idx.data(), s.nnz(), r.begin, r.end)) {
    return absl::FailedPreconditionError(
        absl::StrCat("DGS shard ", shard, ": pull entries outside its range"));
  }
  for (size_t e = 0; e < s.nnz(); ++e) params[s.idx[e]] += s.val[e];
  if (entries != nullptr) *entries = s.nnz();
  versions_[shard] = pull.version;
  return absl::OkStatus();
}

}  // namespace gradex::ps
