// The DGS server shard: its creation and checks, a worker's hello (a full
// sync), the pulls (top R% of what a worker has not yet seen) and the
// staleness bookkeeping; pushes and snapshots have files of their own.
#include "ps/dgs_server_shard.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/sparse.h"
#include "ps/dgs_dense.h"

namespace gradex::ps {

DgsServerShard::DgsServerShard(const DgsLayout& layout, uint32_t shard, DgsRange range,
                               const DgsServerOptions& options)
    : layout_(layout),
      shard_(shard),
      range_(range),
      options_(options),
      pieces_(layout.Pieces(range)),
      m_(range.size(), 0.0f),
      d_(options.workers),
      active_(options.workers, 0),
      pulled_at_(options.workers, 0),
      synced_at_(options.workers, 0),
      ratio_(options.workers, 1.0f),
      push_staleness_(options.workers, 0) {}

absl::StatusOr<DgsServerShard> DgsServerShard::Create(const DgsLayout& layout, uint32_t shard,
                                                      DgsRange range, const DgsServerOptions& o) {
  if (range.begin >= range.end || range.end > layout.total()) {
    return absl::InvalidArgumentError(absl::StrCat("DGS shard ", shard, ": range [", range.begin,
                                                   ",", range.end, ") not inside the model of ",
                                                   layout.total()));
  }
  if (shard >= kDgsMaxShards) {
    return absl::InvalidArgumentError(absl::StrCat("DGS shard id ", shard, " >= ", kDgsMaxShards));
  }
  if (o.workers == 0 || o.workers > kDgsMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS shard: workers ", o.workers, " not in 1 .. ", kDgsMaxWorkers));
  }
  if (o.full_sync_every == 0) {
    return absl::InvalidArgumentError("DGS shard: full_sync_every must be >= 1");
  }
  if (o.max_staleness < o.workers - 1) {
    return absl::InvalidArgumentError(absl::StrCat("DGS shard: max_staleness ", o.max_staleness,
                                                   " < workers - 1 = ", o.workers - 1));
  }
  return DgsServerShard(layout, shard, range, o);
}

absl::Status DgsServerShard::Refuse(DgsRefusal reason, std::string_view detail, DgsRefusal* why) {
  Count(reason);
  if (why != nullptr) *why = reason;
  return absl::FailedPreconditionError(absl::StrCat("DGS shard ", shard_, " refused (",
                                                    std::string(DgsRefusalName(reason)),
                                                    "): ", std::string(detail)));
}

void DgsServerShard::FullSync(uint32_t worker, DgsMessage* reply) {
  *reply = DgsMessage{};
  reply->kind = DgsKind::kFullSync;
  reply->worker = worker;
  reply->shard = shard_;
  reply->version = version_;
  reply->dense = m_;
  d_[worker].assign(m_.size(), 0.0f);  // v_k = M: nothing unsent
  pulled_at_[worker] = synced_at_[worker] = version_;
  ++stats_.full_syncs;
}

absl::Status DgsServerShard::Join(uint32_t worker, std::span<const float> values, DgsMessage* reply,
                                  DgsRefusal* why) {
  if (why != nullptr) *why = DgsRefusal::kNone;
  if (worker >= options_.workers) {
    return Refuse(DgsRefusal::kWrongWorker, absl::StrCat("worker ", worker), why);
  }
  if (!has_model_) {
    if (values.empty()) return Refuse(DgsRefusal::kNoModel, "a hello without values", why);
    if (values.size() != range_.size()) {
      return Refuse(DgsRefusal::kBadLength,
                    absl::StrCat(values.size(), " values for a range of ", range_.size()), why);
    }
    if (!std::all_of(values.begin(), values.end(), [](float x) { return std::isfinite(x); })) {
      return Refuse(DgsRefusal::kNonFinite, "a hello's values", why);
    }
    m_.assign(values.begin(), values.end());
    has_model_ = true;
    for (float x : values) bound_ = std::max(bound_, static_cast<double>(std::fabs(x)));
  }
  active_[worker] = 1;
  ratio_[worker] = 1.0f;
  push_staleness_[worker] = 0;
  ++stats_.joins;
  FullSync(worker, reply);
  return absl::OkStatus();
}

absl::Status DgsServerShard::MakePull(uint32_t worker, DgsMessage* reply, DgsRefusal* why) {
  if (why != nullptr) *why = DgsRefusal::kNone;
  if (worker >= options_.workers || !active_[worker]) {
    return Refuse(DgsRefusal::kNotJoined, absl::StrCat("a pull for worker ", worker), why);
  }
  if (version_ - synced_at_[worker] >= options_.full_sync_every) {
    FullSync(worker, reply);
    return absl::OkStatus();
  }
  // The reply's buffers are reused (a dense pull is the whole range).
  reply->sparse.clear();
  reply->dense.clear();
  reply->ratio = 0;
  reply->reason = DgsRefusal::kNone;
  reply->request = 0;
  reply->kind = DgsKind::kPull;
  reply->worker = worker;
  reply->shard = shard_;
  reply->version = version_;
  std::vector<float>& d = d_[worker];
  uint64_t sent = 0;
  if (ratio_[worker] >= 1.0f) {
    // ASGD: every nonzero of G_k = d_k goes (the top-k rule at k = size),
    // values only, one pass; d_k keeps nothing.
    reply->kind = DgsKind::kDensePull;
    reply->dense.resize(range_.size());
    sent = DgsTakeNonzeros(d.data(), reply->dense.data(), range_.size());
  } else {
    for (const DgsRange& p : pieces_) {
      // G_k of the piece is d_k: its top R% is sent (secondary compression)
      // and zeroed, which is v_k += sent; everything else stays in d_k.
      float* g = d.data() + (p.begin - range_.begin);
      const uint32_t keep = DgsKeep(p.size(), ratio_[worker]);
      if (keep == p.size()) {  // the whole piece: every nonzero, one pass
        for (uint32_t i = 0; i < p.size(); ++i) {
          if (g[i] == 0.0f) continue;
          reply->sparse.idx.push_back(p.begin + i);
          reply->sparse.val.push_back(g[i]);
          g[i] = 0.0f;
        }
        continue;
      }
      kernels::SelectTopKAndZero(g, p.size(), keep, p.begin, &reply->sparse);
    }
    sent = reply->sparse.nnz();
  }
  pulled_at_[worker] = version_;
  ++stats_.pulls;
  stats_.pulled_entries += sent;
  return absl::OkStatus();
}

bool DgsServerShard::MayApply(uint32_t worker) const {
  if (options_.max_staleness == kDgsUnboundedStaleness || !active(worker)) return true;
  // Stalenesses after the push: the pusher's becomes 0 (it pulls next).
  std::vector<uint64_t> s;
  for (uint32_t j = 0; j < options_.workers; ++j) {
    if (active_[j] && j != worker) s.push_back(version_ + 1 - pulled_at_[j]);
  }
  s.push_back(0);
  std::sort(s.begin(), s.end(), std::greater<>());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] + i > options_.max_staleness) return false;
  }
  return true;
}

void DgsServerShard::Deactivate(uint32_t worker) {
  if (worker >= options_.workers) return;
  active_[worker] = 0;
  std::vector<float>().swap(d_[worker]);
}

uint64_t DgsServerShard::staleness(uint32_t worker) const {
  return active(worker) ? version_ - pulled_at_[worker] : 0;
}

uint64_t DgsServerShard::last_push_staleness(uint32_t worker) const {
  return worker < options_.workers ? push_staleness_[worker] : 0;
}

uint64_t DgsServerShard::total_refused() const {
  uint64_t t = 0;
  for (uint64_t c : refused_) t += c;
  return t;
}

}  // namespace gradex::ps
