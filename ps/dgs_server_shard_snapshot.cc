// The DGS server shard's snapshots: M and its version behind a header that
// names the layout and range, checksummed (FNV-1a 64), and their restore.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "catalog/fnv1a.h"
#include "ps/dgs_server_shard.h"

namespace gradex::ps {
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

}  // namespace

absl::StatusOr<transport::Bytes> DgsServerShard::Snapshot() const {
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
  transport::Bytes out(sizeof h + values + sizeof(uint64_t));
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

}  // namespace gradex::ps
