#include "member/epoch_sync.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "catalog/bucket_algorithms.h"
#include "collectives/link.h"

namespace gradex::member {
namespace {

constexpr uint32_t kMagic = 0x59535847;  // "GXSY" little-endian
constexpr size_t kNameBytes = 64;

// Little-endian fixed layout: magic, epoch, next_step, newest_epoch,
// values_rank, plan_version, algorithm[64], density, teams, tau,
// step_deadline_ms, the rules (start_iter u64, min_compression_rate f64,
// dense_probe_period u64, a u8 of flags: bit 0 refuse_nonfinite, bit 1 hierarchy), then the
// algorithm's parameters: a count (u8,
// <= catalog::kMaxParams) and per parameter its name's length (u8, 1..64), the name and its value
// (f64); then the per-bucket algorithms: a bucket count (u16, <= catalog::kMaxBucketAlgorithms), a
// table of the distinct names (u8 count <= catalog::kMaxDistinctBucketAlgorithms, each a u8 length
// 1..64 and the name) and one u8 per bucket (0 = the plan's algorithm, i =
// the table's i-th name). A table keeps the message at a few KiB whatever
// the names: 4096 buckets cost 4 KiB, not 4096 names.
constexpr size_t kFixedSize = 4 + 4 + 8 + 8 + 4 + 8 + kNameBytes + 8 + 4 * 2 + 4 + 8 * 3 + 1 + 1;
// The longest agreement message a peer may send: the encoding above at most
// (under 11 KiB), with room for fields to come. A receive takes no more,
// so a member cannot make its peers allocate at entry.
constexpr size_t kMaxMessageBytes = 64 * 1024;
static_assert(kFixedSize + catalog::kMaxParams * (1 + catalog::kMaxParamNameBytes + 8) + 2 + 1 +
                  catalog::kMaxDistinctBucketAlgorithms * (1 + kNameBytes) +
                  catalog::kMaxBucketAlgorithms <=
              kMaxMessageBytes);

class Writer {
 public:
  explicit Writer(transport::Bytes* b) : b_(b) {}
  template <typename T>
  void Put(const T& v) {
    const size_t at = b_->size();
    b_->resize(at + sizeof(T));
    std::memcpy(b_->data() + at, &v, sizeof(T));
  }

 private:
  transport::Bytes* b_;
};

class Reader {
 public:
  explicit Reader(const transport::Bytes& b) : b_(b) {}
  template <typename T>
  T Get() {
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  size_t left() const { return b_.size() - at_; }
  const uint8_t* Skip(size_t n) {
    const uint8_t* p = b_.data() + at_;
    at_ += n;
    return p;
  }

 private:
  const transport::Bytes& b_;
  size_t at_ = 0;
};

transport::Bytes Encode(uint32_t epoch, const SyncState& s) {
  transport::Bytes b;
  b.reserve(kFixedSize + s.values.params.size() * (1 + catalog::kMaxParamNameBytes + 8));
  Writer w(&b);
  w.Put(kMagic);
  w.Put(epoch);
  w.Put(s.next_step);
  w.Put(s.newest_epoch);
  w.Put(s.values_rank);
  w.Put(s.values.plan_version);
  char name[kNameBytes] = {};
  std::memcpy(name, s.values.algorithm.data(), std::min(s.values.algorithm.size(), kNameBytes - 1));
  for (char c : name) w.Put(c);
  w.Put(s.values.density);
  w.Put(s.values.teams);
  w.Put(s.values.tau);
  w.Put(s.values.step_deadline_ms);
  w.Put(s.values.rules.start_iter);
  w.Put(s.values.rules.min_compression_rate);
  w.Put(s.values.rules.dense_probe_period);
  w.Put(static_cast<uint8_t>((s.values.rules.refuse_nonfinite ? 1 : 0) |
                             (s.values.rules.hierarchy ? 2 : 0)));
  // BarrierValues::From keeps at most kMaxParams names of 1..64 bytes.
  w.Put(static_cast<uint8_t>(s.values.params.size()));
  for (const auto& [pname, value] : s.values.params) {
    w.Put(static_cast<uint8_t>(pname.size()));
    for (char c : pname) w.Put(c);
    w.Put(value);
  }
  // BarrierValues::From keeps only lists CheckBucketAlgorithms accepts.
  const std::vector<std::string>& buckets = s.values.bucket_algorithms;
  std::vector<std::string_view> table;
  transport::Bytes index;
  index.reserve(buckets.size());
  for (const std::string& name : buckets) {
    if (name.empty()) {
      index.push_back(0);
      continue;
    }
    auto it = std::find(table.begin(), table.end(), name);
    if (it == table.end()) it = table.insert(table.end(), name);
    index.push_back(static_cast<uint8_t>(it - table.begin() + 1));
  }
  w.Put(static_cast<uint16_t>(buckets.size()));
  w.Put(static_cast<uint8_t>(table.size()));
  for (std::string_view name : table) {
    w.Put(static_cast<uint8_t>(name.size()));
    for (char c : name) w.Put(c);
  }
  b.insert(b.end(), index.begin(), index.end());
  return b;
}

// The per-bucket section of a barrier message (Encode's layout), bounded by
// what is left before each read.
absl::Status DecodeBuckets(Reader& r, std::vector<std::string>* out) {
  if (r.left() < 3) return absl::DataLossError("bucket algorithms truncated");
  const size_t count = r.Get<uint16_t>();
  const size_t names = r.Get<uint8_t>();
  if (count > catalog::kMaxBucketAlgorithms) {
    return absl::DataLossError(absl::StrCat(count, " bucket algorithms"));
  }
  if (names > catalog::kMaxDistinctBucketAlgorithms) {
    return absl::DataLossError(absl::StrCat(names, " distinct bucket algorithms"));
  }
  std::vector<std::string> table;
  for (size_t i = 0; i < names; ++i) {
    if (r.left() < 1) return absl::DataLossError("bucket algorithm names truncated");
    const size_t len = r.Get<uint8_t>();
    if (len == 0 || len > catalog::kMaxParamNameBytes || r.left() < len) {
      return absl::DataLossError("bad bucket algorithm name length");
    }
    const uint8_t* p = r.Skip(len);
    table.emplace_back(reinterpret_cast<const char*>(p), len);
    if (catalog::Find(table.back()) == nullptr) {
      return absl::DataLossError("bucket algorithm not in the catalog");
    }
  }
  if (r.left() < count) return absl::DataLossError("bucket algorithm indices truncated");
  out->assign(count, std::string());
  for (size_t i = 0; i < count; ++i) {
    const size_t at = r.Get<uint8_t>();
    if (at > table.size()) return absl::DataLossError("bucket algorithm index out of range");
    if (at > 0) (*out)[i] = table[at - 1];
  }
  return absl::OkStatus();
}

absl::StatusOr<SyncState> Decode(const transport::Bytes& b, uint32_t epoch, int from, int world) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("epoch sync: from rank ", from, ": ", why));
  };
  if (b.size() < kFixedSize) {
    return bad(absl::StrCat(b.size(), " bytes, expected at least ", kFixedSize));
  }
  Reader r(b);
  if (r.Get<uint32_t>() != kMagic) return bad("bad magic");
  if (const uint32_t e = r.Get<uint32_t>(); e != epoch) {
    return bad(absl::StrCat("epoch ", e, ", this rank is in ", epoch));
  }
  SyncState s;
  s.next_step = r.Get<uint64_t>();
  s.newest_epoch = r.Get<uint64_t>();
  s.values_rank = r.Get<int32_t>();
  s.values.plan_version = r.Get<uint64_t>();
  const uint8_t* name = r.Skip(kNameBytes);
  const void* nul = std::memchr(name, 0, kNameBytes);
  if (nul == nullptr) return bad("algorithm name not terminated");
  s.values.algorithm.assign(reinterpret_cast<const char*>(name),
                            static_cast<const uint8_t*>(nul) - name);
  s.values.density = r.Get<double>();
  s.values.teams = r.Get<int32_t>();
  s.values.tau = r.Get<int32_t>();
  s.values.step_deadline_ms = r.Get<uint32_t>();
  s.values.rules.start_iter = r.Get<uint64_t>();
  s.values.rules.min_compression_rate = r.Get<double>();
  s.values.rules.dense_probe_period = r.Get<uint64_t>();
  const uint8_t flags = r.Get<uint8_t>();
  if (flags > 3) return bad(absl::StrCat("rule flags ", flags));
  s.values.rules.refuse_nonfinite = (flags & 1) != 0;
  s.values.rules.hierarchy = (flags & 2) != 0;
  const size_t count = r.Get<uint8_t>();
  if (count > catalog::kMaxParams) return bad(absl::StrCat(count, " parameters"));
  for (size_t i = 0; i < count; ++i) {
    // Each length is checked against what is left before the bytes are read.
    if (r.left() < 1) return bad("parameters truncated");
    const size_t len = r.Get<uint8_t>();
    if (len == 0 || len > catalog::kMaxParamNameBytes || r.left() < len + 8) {
      return bad("bad parameter name length");
    }
    const uint8_t* pname = r.Skip(len);
    std::string key(reinterpret_cast<const char*>(pname), len);
    const double value = r.Get<double>();
    if (!s.values.params.emplace(std::move(key), value).second) return bad("repeated parameter");
  }
  if (absl::Status st = DecodeBuckets(r, &s.values.bucket_algorithms); !st.ok()) {
    return bad(std::string(st.message()));
  }
  if (r.left() != 0) return bad(absl::StrCat(r.left(), " trailing bytes"));
  const BarrierValues& v = s.values;
  if (s.values_rank < 0 || s.values_rank >= world) return bad("values rank out of range");
  if (!(std::isfinite(v.density) && v.density > 0 && v.density <= 1)) return bad("bad density");
  if (v.teams < 1 || v.tau < 1) return bad("teams and period must be >= 1");
  // The parameters are checked against the catalog entries in play (the
  // algorithm's and the buckets'), as the coordinator checked the job config.
  if (catalog::Find(v.algorithm) != nullptr) {
    if (absl::Status st = catalog::CheckParamsInPlay(
            catalog::AlgorithmsInPlay(v.algorithm, v.bucket_algorithms), v.params);
        !st.ok()) {
      return bad(std::string(st.message()));
    }
  } else if (!v.params.empty()) {
    return bad("parameters for an algorithm the catalog lacks");
  }
  if (v.step_deadline_ms == 0) return bad("zero step deadline");
  if (absl::Status st = CheckBucketRules(v.rules); !st.ok()) return bad(std::string(st.message()));
  return s;
}

// SendRecv that gives up early, between slices of waiting, when `abandon`
// says the epoch is already superseded (its peers will never come).
absl::StatusOr<transport::Bytes> Exchange(transport::Transport& t, int to, transport::Bytes out,
                                          int from, uint64_t tag, transport::Deadline deadline,
                                          const std::function<bool()>& abandon) {
  absl::StatusOr<transport::RequestId> recv = t.PostRecvAtMost(from, tag, kMaxMessageBytes);
  if (!recv.ok()) return recv.status();
  absl::StatusOr<transport::RequestId> send = t.PostSend(to, tag, std::move(out));
  if (!send.ok()) {
    t.CancelAll(deadline);
    return send.status();
  }
  transport::Bytes in;
  for (;;) {
    const transport::Deadline slice =
        std::min(deadline, transport::Clock::now() + std::chrono::milliseconds(20));
    absl::Status s = t.Wait(*recv, slice, &in);
    if (s.ok()) break;
    if (s.code() != absl::StatusCode::kDeadlineExceeded || transport::Clock::now() >= deadline) {
      t.CancelAll(transport::DeadlineIn(std::chrono::milliseconds(100)));
      return s;
    }
    if (abandon && abandon()) {
      t.CancelAll(transport::DeadlineIn(std::chrono::milliseconds(100)));
      return absl::AbortedError("superseded by a newer epoch");
    }
  }
  if (absl::Status s = t.Wait(*send, deadline, nullptr); !s.ok()) {
    t.CancelAll(transport::DeadlineIn(std::chrono::milliseconds(100)));
    return s;
  }
  return in;
}

}  // namespace

transport::Bytes EncodeSyncMessage(uint32_t epoch, const SyncState& s) { return Encode(epoch, s); }

absl::StatusOr<SyncState> DecodeSyncMessage(const transport::Bytes& b, uint32_t epoch, int from,
                                            int world) {
  return Decode(b, epoch, from, world);
}

BarrierValues BarrierValues::From(const Plan& plan, const BucketRules& rules) {
  BarrierValues v;
  v.plan_version = plan.version;
  v.algorithm = plan.algorithm;
  v.density = plan.density;
  v.teams = plan.teams;
  v.tau = plan.tau;
  // The plan's parameters were checked when it arrived; the wire bounds are
  // enforced again here so Encode never writes what Decode would refuse.
  for (const auto& [name, value] : plan.params) {
    if (v.params.size() == catalog::kMaxParams) break;
    if (name.empty() || name.size() > catalog::kMaxParamNameBytes) continue;
    v.params.emplace(name, value);
  }
  v.step_deadline_ms = static_cast<uint32_t>(plan.step_deadline.count());
  // Likewise the per-bucket algorithms: a list out of bounds is not sent
  // (every bucket runs the plan's algorithm); trailing "" entries are
  // dropped, so "" and missing agree.
  if (catalog::CheckBucketAlgorithms(plan.bucket_algorithms).ok()) {
    v.bucket_algorithms = plan.bucket_algorithms;
    while (!v.bucket_algorithms.empty() && v.bucket_algorithms.back().empty()) {
      v.bucket_algorithms.pop_back();
    }
  }
  // Agent::Start refuses rules out of bounds; this keeps Encode's promise.
  if (CheckBucketRules(rules).ok()) v.rules = rules;
  return v;
}

void BarrierValues::ApplyTo(Plan* plan) const {
  plan->algorithm = algorithm;
  plan->density = density;
  plan->teams = teams;
  plan->tau = tau;
  plan->params = params;
  plan->bucket_algorithms = bucket_algorithms;
  plan->step_deadline = std::chrono::milliseconds(step_deadline_ms);
}

absl::StatusOr<SyncState> AgreeInBand(transport::Transport& transport, uint32_t epoch,
                                      uint64_t sequence, SyncState mine,
                                      transport::Deadline deadline,
                                      const std::function<bool()>& abandon) {
  const int p = transport.size(), r = transport.rank();
  SyncState acc = std::move(mine);
  acc.values_rank = r;
  for (int d = 1, round = 0; d < p; d *= 2, ++round) {
    const uint64_t tag =
        collectives::MessageTag(kSyncPhase, sequence, static_cast<uint32_t>(round));
    const int to = (r + d) % p, from = (r - d + p) % p;
    absl::StatusOr<transport::Bytes> got =
        Exchange(transport, to, Encode(epoch, acc), from, tag, deadline, abandon);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("epoch ", epoch, " sync round ", round, " (rank ", r,
                                       "): ", got.status().message()));
    }
    absl::StatusOr<SyncState> v = Decode(*got, epoch, from, p);
    if (!v.ok()) return v.status();
    acc.next_step = std::max(acc.next_step, v->next_step);
    acc.newest_epoch = std::max(acc.newest_epoch, v->newest_epoch);
    if (v->values_rank < acc.values_rank) {
      acc.values_rank = v->values_rank;
      acc.values = std::move(v->values);
    }
  }
  return acc;
}

}  // namespace gradex::member
