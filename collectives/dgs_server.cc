#include "collectives/dgs_server.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"
#include "collectives/dgs_dense.h"
#include "kernels/sparse.h"

namespace gradex {
namespace {

constexpr uint32_t kSnapshotMagic = 0x53534744;  // "DGSS"
constexpr uint16_t kSnapshotFormat = 1;

#pragma pack(push, 1)
struct SnapshotHeader {
  uint32_t magic;
  uint16_t format;
  uint16_t has_model;  // 0 or 1
  uint64_t fingerprint;
  uint32_t shard;
  uint32_t begin;
  uint32_t end;
  uint32_t reserved;  // 0
  uint64_t version;
};
#pragma pack(pop)
static_assert(sizeof(SnapshotHeader) == 40);

// The bound after adding values of at most `largest` in magnitude: float
// rounding may put a sum up to 2^-24 above the exact one, hence the margin.
double GrownBound(double bound, float largest) { return (bound + largest) * (1.0 + 0x1p-23); }

}  // namespace

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

absl::StatusOr<Bytes> DgsServerShard::Snapshot() const {
  const size_t bad = std::count_if(m_.begin(), m_.end(), [](float x) { return !std::isfinite(x); });
  if (bad > 0) {
    return absl::FailedPreconditionError(absl::StrCat("DGS shard ", shard_, ": M holds ", bad,
                                                      " non-finite values: not snapshotted"));
  }
  SnapshotHeader h{};
  h.magic = kSnapshotMagic;
  h.format = kSnapshotFormat;
  h.has_model = has_model_ ? 1 : 0;
  h.fingerprint = layout_.fingerprint();
  h.shard = shard_;
  h.begin = range_.begin;
  h.end = range_.end;
  h.version = version_;
  const size_t values = m_.size() * sizeof(float);
  Bytes out(sizeof h + values + sizeof(uint64_t));
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, m_.data(), values);
  // FNV-1a 64: any change of one byte changes the sum (each step is a
  // bijection of the state), which is what a torn or bit-flipped file needs.
  const uint64_t sum = catalog::Fnv1a(std::span<const uint8_t>(out).first(sizeof h + values));
  std::memcpy(out.data() + sizeof h + values, &sum, sizeof sum);
  return out;
}

absl::Status DgsServerShard::Restore(std::span<const uint8_t> snap) {
  auto bad = [&](std::string_view what) {
    return absl::DataLossError(
        absl::StrCat("DGS shard ", shard_, " snapshot refused: ", std::string(what)));
  };
  const size_t values = size_t{range_.size()} * sizeof(float);
  if (snap.size() != sizeof(SnapshotHeader) + values + sizeof(uint64_t)) {
    return bad(absl::StrCat("length ", snap.size(),
                            " != ", sizeof(SnapshotHeader) + values + sizeof(uint64_t)));
  }
  SnapshotHeader h;
  std::memcpy(&h, snap.data(), sizeof h);
  if (h.magic != kSnapshotMagic) return bad("magic");
  if (h.format != kSnapshotFormat || h.has_model > 1 || h.reserved != 0) return bad("format");
  if (h.fingerprint != layout_.fingerprint()) return bad("layout fingerprint");
  if (h.shard != shard_) return bad(absl::StrCat("shard ", h.shard));
  if (h.begin != range_.begin || h.end != range_.end) {
    return bad(absl::StrCat("range [", h.begin, ",", h.end, ")"));
  }
  uint64_t sum;
  std::memcpy(&sum, snap.data() + sizeof h + values, sizeof sum);
  if (sum != catalog::Fnv1a(snap.first(sizeof h + values))) return bad("checksum");
  std::vector<float> m(range_.size());
  std::memcpy(m.data(), snap.data() + sizeof h, values);
  if (!std::all_of(m.begin(), m.end(), [](float x) { return std::isfinite(x); })) {
    return bad("a non-finite value");
  }
  m_ = std::move(m);
  bound_ = 0;
  for (float x : m_) bound_ = std::max(bound_, static_cast<double>(std::fabs(x)));
  has_model_ = h.has_model == 1;
  version_ = h.version;
  for (uint32_t w = 0; w < options_.workers; ++w) Deactivate(w);
  return absl::OkStatus();
}

}  // namespace gradex
