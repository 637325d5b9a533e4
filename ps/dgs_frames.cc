#include "ps/dgs_frames.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectives/wire/frame.h"
#include "collectives/wire/frame_walk.h"

namespace gradex::ps {
namespace {

constexpr size_t kHeader = sizeof(DgsMessageHeader);

absl::Status Refuse(DgsRefusal* why, DgsRefusal reason, std::string_view detail) {
  *why = reason;
  return absl::DataLossError(absl::StrCat(
      "DGS message refused (", std::string(DgsRefusalName(reason)), "): ", std::string(detail)));
}

void Append(transport::Bytes* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

collectives::wire::FrameMeta MetaOf(const DgsWireContext& ctx, DgsKind kind, uint64_t version,
                                    uint32_t sender) {
  collectives::wire::FrameMeta meta;
  meta.job_id = ctx.job_id;
  meta.epoch = ctx.epoch;
  meta.step = version;
  meta.algorithm = collectives::wire::CatalogId("dgs");
  meta.phase = static_cast<uint16_t>(kind);
  meta.sender = sender;
  return meta;
}

transport::Bytes StartMessage(const DgsWireContext& ctx, DgsKind kind, uint32_t worker,
                              uint32_t request, uint64_t version, float ratio, DgsRefusal reason,
                              uint32_t pieces, transport::Bytes room = {}) {
  DgsMessageHeader h{};
  h.magic = kDgsMagic;
  h.format = kDgsFormat;
  h.kind = static_cast<uint16_t>(kind);
  h.job_id = ctx.job_id;
  h.epoch = ctx.epoch;
  h.worker = worker;
  h.shard = ctx.shard;
  h.pieces = pieces;
  h.fingerprint = ctx.layout->fingerprint();
  h.version = version;
  h.ratio = ratio;
  h.reason = static_cast<uint32_t>(reason);
  h.request = request;
  transport::Bytes out = std::move(room);  // its capacity reused, its bytes not
  out.clear();
  Append(&out, &h, sizeof h);
  return out;
}

absl::Status CheckContext(const DgsWireContext& ctx) {
  if (ctx.layout == nullptr || ctx.range.begin >= ctx.range.end ||
      ctx.range.end > ctx.layout->total()) {
    return absl::InvalidArgumentError("DGS: a wire context without a layout or a valid range");
  }
  return absl::OkStatus();
}

absl::StatusOr<transport::Bytes> EncodeDense(const DgsWireContext& ctx, DgsKind kind,
                                             uint32_t worker, uint32_t request, uint64_t version,
                                             float ratio, uint32_t sender,
                                             std::span<const float> values,
                                             transport::Bytes room = {}) {
  if (absl::Status s = CheckContext(ctx); !s.ok()) return s;
  if (values.size() != ctx.range.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DGS: ", values.size(), " values for a range of ", ctx.range.size()));
  }
  const std::vector<DgsRange> pieces = ctx.layout->Pieces(ctx.range);
  transport::Bytes out = StartMessage(ctx, kind, worker, request, version, ratio, DgsRefusal::kNone,
                                      static_cast<uint32_t>(pieces.size()), std::move(room));
  out.reserve(out.size() + pieces.size() * sizeof(collectives::wire::FrameHeader) +
              values.size() * sizeof(float));
  const collectives::wire::FrameMeta meta = MetaOf(ctx, kind, version, sender);
  for (const DgsRange& p : pieces) {
    collectives::wire::AppendDenseFrame(meta, {p.begin, p.end},
                                        values.data() + (p.begin - ctx.range.begin), &out);
  }
  return out;
}

absl::StatusOr<transport::Bytes> EncodeSparse(const DgsWireContext& ctx, DgsKind kind,
                                              uint32_t worker, uint32_t request, uint64_t version,
                                              float ratio, uint32_t sender,
                                              kernels::SparseView entries,
                                              transport::Bytes room = {}) {
  if (absl::Status s = CheckContext(ctx); !s.ok()) return s;
  if (!kernels::IsSortedUniqueInRange(entries.idx, entries.nnz, ctx.range.begin, ctx.range.end)) {
    return absl::InvalidArgumentError("DGS: entries not sorted, unique and inside the range");
  }
  const std::vector<DgsRange> pieces = ctx.layout->Pieces(ctx.range);
  transport::Bytes out = StartMessage(ctx, kind, worker, request, version, ratio, DgsRefusal::kNone,
                                      static_cast<uint32_t>(pieces.size()), std::move(room));
  // Room for the whole message at once (each piece takes the smaller of its
  // sparse and dense encodings, so this bounds it): growing piece by piece
  // copied the message once per piece.
  out.reserve(out.size() + pieces.size() * sizeof(collectives::wire::FrameHeader) +
              std::min<uint64_t>(uint64_t{entries.nnz} * 8, uint64_t{ctx.range.size()} * 4));
  const collectives::wire::FrameMeta meta = MetaOf(ctx, kind, version, sender);
  size_t at = 0;
  for (const DgsRange& p : pieces) {
    size_t end = at;
    while (end < entries.nnz && entries.idx[end] < p.end) ++end;
    collectives::wire::AppendBlockFrame(meta, {p.begin, p.end},
                                        {entries.idx + at, entries.val + at, end - at}, &out);
    at = end;
  }
  return out;
}

// Reads the frames of one message body: one per piece, in order.
absl::Status ReadPieces(std::span<const uint8_t> m, const DgsWireContext& ctx,
                        const DgsMessageHeader& h, uint32_t sender, bool dense_only,
                        DgsMessage* out, DgsRefusal* why) {
  const std::vector<DgsRange> pieces = ctx.layout->Pieces(ctx.range);
  if (h.pieces != pieces.size()) {
    return Refuse(why, DgsRefusal::kWrongPieces,
                  absl::StrCat("pieces ", h.pieces, " != ", pieces.size()));
  }
  const uint16_t algorithm = static_cast<uint16_t>(collectives::wire::CatalogId("dgs"));
  if (dense_only) {
    out->dense.reserve(ctx.range.size());  // filled piece by piece, no zero pass
  } else {
    // At most one entry per 4 payload bytes, and per element of the range:
    // bounded by what the receiver knows, whatever the header says.
    const size_t most = std::min<size_t>(ctx.range.size(), m.size() / sizeof(float));
    out->sparse.idx.reserve(most);
    out->sparse.val.reserve(most);
  }
  size_t off = kHeader;
  for (const DgsRange& p : pieces) {
    collectives::wire::FrameAt at;
    const collectives::wire::FrameShape shape = collectives::wire::ReadFrameAt(m, off, &at);
    const collectives::wire::FrameHeader& f = at.header;
    if (shape == collectives::wire::FrameShape::kTruncatedHeader) {
      return Refuse(why, DgsRefusal::kTruncated,
                    absl::StrCat("ends inside a frame header at ", off));
    }
    if (shape == collectives::wire::FrameShape::kBadMagic ||
        shape == collectives::wire::FrameShape::kBadVersion) {
      return Refuse(why, DgsRefusal::kBadMagic, absl::StrCat("frame magic/version at ", off));
    }
    off = at.body();
    if (f.job_id != ctx.job_id || f.epoch != ctx.epoch) {
      return Refuse(why, DgsRefusal::kWrongJob, "frame job or epoch");
    }
    if (f.algorithm != algorithm || f.phase != h.kind || f.step != h.version ||
        f.sender != sender || f.block_begin != p.begin || f.block_end != p.end) {
      return Refuse(why, DgsRefusal::kWrongPieces,
                    absl::StrCat("frame for [", f.block_begin, ",", f.block_end, ") step ", f.step,
                                 " sender ", f.sender, ", expected [", p.begin, ",", p.end, ")"));
    }
    // DGS sends plain float frames only: quantized ones are refused here.
    const bool dense = f.flags == collectives::wire::kFrameDense,
               sparse = f.flags == collectives::wire::kFrameSparse;
    if (shape != collectives::wire::FrameShape::kOk || !(dense || (sparse && !dense_only))) {
      return Refuse(why, DgsRefusal::kBadFlags, absl::StrCat("frame flags ", f.flags));
    }
    if (f.count > p.size() || (dense && f.count != p.size())) {
      return Refuse(why, DgsRefusal::kOverCapacity,
                    absl::StrCat("count ", f.count, " for a piece of ", p.size()));
    }
    const size_t payload = at.payload;
    if (!at.fits()) {
      return Refuse(why, DgsRefusal::kTruncated,
                    absl::StrCat("payload of ", payload, " bytes, ", at.body_left, " left"));
    }
    const uint8_t* body = m.data() + off;
    const float* vals = reinterpret_cast<const float*>(dense ? body : body + 4 * size_t{f.count});
    // One branch-free pass (a dense piece is a whole layer); the bad value
    // is looked for only when there is one.
    bool finite = true;
    for (uint32_t i = 0; i < f.count; ++i) finite &= std::isfinite(vals[i]);
    if (!finite) {
      const uint32_t i = static_cast<uint32_t>(
          std::find_if(vals, vals + f.count, [](float x) { return !std::isfinite(x); }) - vals);
      return Refuse(why, DgsRefusal::kNonFinite, absl::StrCat("value ", i, " of piece ", p.begin));
    }
    if (dense_only) {
      out->dense.insert(out->dense.end(), vals, vals + f.count);
    } else if (dense) {
      // Only nonzeros are entries (a dense frame is the smaller encoding).
      for (uint32_t i = 0; i < f.count; ++i) {
        if (vals[i] == 0.0f) continue;
        out->sparse.idx.push_back(p.begin + i);
        out->sparse.val.push_back(vals[i]);
      }
    } else {
      const uint32_t* idx = reinterpret_cast<const uint32_t*>(body);
      if (!kernels::IsSortedUniqueInRange(idx, f.count, p.begin, p.end)) {
        for (uint32_t i = 0; i < f.count; ++i) {
          if (idx[i] < p.begin || idx[i] >= p.end) {
            return Refuse(why, DgsRefusal::kIndexOutOfRange,
                          absl::StrCat("index ", idx[i], " outside [", p.begin, ",", p.end, ")"));
          }
        }
        return Refuse(why, DgsRefusal::kUnsortedIndices,
                      absl::StrCat("indices of piece [", p.begin, ",", p.end, ") not increasing"));
      }
      out->sparse.idx.insert(out->sparse.idx.end(), idx, idx + f.count);
      out->sparse.val.insert(out->sparse.val.end(), vals, vals + f.count);
    }
    off += payload;
  }
  if (off != m.size()) {
    return Refuse(why, DgsRefusal::kBadLength, absl::StrCat(m.size() - off, " trailing bytes"));
  }
  return absl::OkStatus();
}

// Reads and checks the message header; the kinds allowed depend on the side.
absl::Status ReadHeader(std::span<const uint8_t> m, const DgsWireContext& ctx, uint32_t worker,
                        bool from_worker, DgsMessageHeader* h, DgsRefusal* why) {
  if (m.size() < kHeader) {
    return Refuse(why, DgsRefusal::kTruncated, absl::StrCat(m.size(), " bytes"));
  }
  std::memcpy(h, m.data(), kHeader);
  if (h->magic != kDgsMagic || h->format != kDgsFormat ||
      (h->unapplied != 0 && static_cast<DgsKind>(h->kind) != DgsKind::kFullSync)) {
    return Refuse(why, DgsRefusal::kBadMagic,
                  absl::StrCat("magic ", h->magic, " format ", h->format));
  }
  const auto kind = static_cast<DgsKind>(h->kind);
  const bool ok_kind = from_worker ? (kind == DgsKind::kHello || kind == DgsKind::kPush ||
                                      kind == DgsKind::kDensePush || kind == DgsKind::kLeave)
                                   : (kind == DgsKind::kPull || kind == DgsKind::kDensePull ||
                                      kind == DgsKind::kFullSync || kind == DgsKind::kRefused);
  if (!ok_kind) return Refuse(why, DgsRefusal::kWrongKind, absl::StrCat("kind ", h->kind));
  if (h->job_id != ctx.job_id || h->epoch != ctx.epoch) {
    return Refuse(why, DgsRefusal::kWrongJob,
                  absl::StrCat("job ", h->job_id, " epoch ", h->epoch, ", expected ", ctx.job_id,
                               " epoch ", ctx.epoch));
  }
  if (h->worker >= ctx.workers || h->worker != worker) {
    return Refuse(why, DgsRefusal::kWrongWorker,
                  absl::StrCat("worker ", h->worker, ", expected ", worker, " of ", ctx.workers));
  }
  if (h->shard != ctx.shard) {
    return Refuse(why, DgsRefusal::kWrongShard,
                  absl::StrCat("shard ", h->shard, ", expected ", ctx.shard));
  }
  if (h->fingerprint != ctx.layout->fingerprint()) {
    return Refuse(why, DgsRefusal::kWrongLayout, "layout fingerprint differs");
  }
  // A sparse push carries its R; a dense one is R = 1 by definition.
  const bool bad_ratio = kind == DgsKind::kPush        ? !(h->ratio > 0.0f && h->ratio <= 1.0f)
                         : kind == DgsKind::kDensePush ? h->ratio != 1.0f
                                                       : h->ratio != 0.0f;
  if (bad_ratio) {
    return Refuse(why, DgsRefusal::kBadRatio, absl::StrCat("ratio ", h->ratio));
  }
  if ((kind == DgsKind::kRefused) != (h->reason != 0) ||
      h->reason >= static_cast<uint32_t>(DgsRefusal::kCount)) {
    return Refuse(why, DgsRefusal::kWrongKind, absl::StrCat("reason ", h->reason));
  }
  return absl::OkStatus();
}

absl::Status Decode(std::span<const uint8_t> m, const DgsWireContext& ctx, uint32_t worker,
                    bool from_worker, DgsMessage* out, DgsRefusal* why) {
  *why = DgsRefusal::kNone;
  if (absl::Status s = CheckContext(ctx); !s.ok()) return s;
  DgsMessageHeader h;
  if (absl::Status s = ReadHeader(m, ctx, worker, from_worker, &h, why); !s.ok()) return s;
  // Fields reset one by one: the value buffers keep their room (a dense
  // message is the whole range, decoded again every step).
  out->sparse.clear();
  out->dense.clear();
  out->kind = static_cast<DgsKind>(h.kind);
  out->worker = h.worker;
  out->shard = h.shard;
  out->version = h.version;
  out->ratio = h.ratio;
  out->reason = static_cast<DgsRefusal>(h.reason);
  out->request = h.request;
  out->unapplied = h.unapplied;  // only compared with the worker's own numbers
  if (out->kind == DgsKind::kRefused || out->kind == DgsKind::kLeave) {
    if (h.pieces != 0 || m.size() != kHeader) {
      return Refuse(why, DgsRefusal::kBadLength, "a refusal or leave with frames");
    }
    return absl::OkStatus();
  }
  const bool dense = out->kind == DgsKind::kHello || out->kind == DgsKind::kFullSync ||
                     out->kind == DgsKind::kDensePush || out->kind == DgsKind::kDensePull;
  return ReadPieces(m, ctx, h, from_worker ? h.worker : ctx.shard, dense, out, why);
}

}  // namespace

std::string_view DgsRefusalName(DgsRefusal r) {
  static constexpr std::string_view kNames[] = {
      "none",         "truncated",     "bad_magic",     "wrong_kind",         "wrong_job",
      "wrong_worker", "wrong_shard",   "wrong_layout",  "bad_ratio",          "wrong_pieces",
      "bad_flags",    "over_capacity", "bad_length",    "index_out_of_range", "unsorted_indices",
      "non_finite",   "not_joined",    "version_ahead", "stale_version",      "beyond_staleness",
      "no_model",     "overflow"};
  static_assert(std::size(kNames) == static_cast<size_t>(DgsRefusal::kCount));
  const auto i = static_cast<size_t>(r);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

absl::StatusOr<transport::Bytes> EncodeDgsHello(const DgsWireContext& ctx, uint32_t worker,
                                                uint32_t request, std::span<const float> values,
                                                uint64_t last_version) {
  return EncodeDense(ctx, DgsKind::kHello, worker, request, last_version, 0, worker, values);
}

absl::StatusOr<transport::Bytes> EncodeDgsDensePush(const DgsWireContext& ctx, uint32_t worker,
                                                    uint32_t request, uint64_t base_version,
                                                    std::span<const float> change,
                                                    transport::Bytes room) {
  return EncodeDense(ctx, DgsKind::kDensePush, worker, request, base_version, 1.0f, worker, change,
                     std::move(room));
}

absl::StatusOr<transport::Bytes> EncodeDgsPush(const DgsWireContext& ctx, uint32_t worker,
                                               uint32_t request, uint64_t base_version, float ratio,
                                               kernels::SparseView entries) {
  if (!(ratio > 0.0f && ratio <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("DGS push: ratio ", ratio));
  }
  return EncodeSparse(ctx, DgsKind::kPush, worker, request, base_version, ratio, worker, entries);
}

absl::StatusOr<transport::Bytes> EncodeDgsReply(const DgsWireContext& ctx, const DgsMessage& reply,
                                                transport::Bytes room) {
  if (reply.kind == DgsKind::kFullSync || reply.kind == DgsKind::kDensePull) {
    absl::StatusOr<transport::Bytes> out =
        EncodeDense(ctx, reply.kind, reply.worker, reply.request, reply.version, 0, ctx.shard,
                    reply.dense, std::move(room));
    if (out.ok() && reply.kind == DgsKind::kFullSync) {
      std::memcpy(out->data() + offsetof(DgsMessageHeader, unapplied), &reply.unapplied,
                  sizeof reply.unapplied);
    }
    return out;
  }
  if (reply.kind == DgsKind::kPull) {
    return EncodeSparse(ctx, reply.kind, reply.worker, reply.request, reply.version, 0, ctx.shard,
                        kernels::View(reply.sparse), std::move(room));
  }
  return absl::InvalidArgumentError("DGS: a reply is a pull, a dense pull or a full sync");
}

transport::Bytes EncodeDgsLeave(const DgsWireContext& ctx, uint32_t worker, uint32_t request) {
  return StartMessage(ctx, DgsKind::kLeave, worker, request, 0, 0, DgsRefusal::kNone, 0);
}

transport::Bytes EncodeDgsRefused(const DgsWireContext& ctx, uint32_t worker, uint32_t request,
                                  uint64_t version, DgsRefusal reason) {
  return StartMessage(ctx, DgsKind::kRefused, worker, request, version, 0, reason, 0);
}

absl::Status DecodeDgsFromWorker(std::span<const uint8_t> message, const DgsWireContext& ctx,
                                 uint32_t worker, DgsMessage* out, DgsRefusal* why) {
  return Decode(message, ctx, worker, /*from_worker=*/true, out, why);
}

absl::Status DecodeDgsFromShard(std::span<const uint8_t> message, const DgsWireContext& ctx,
                                uint32_t worker, DgsMessage* out, DgsRefusal* why) {
  return Decode(message, ctx, worker, /*from_worker=*/false, out, why);
}

uint64_t DgsMaxMessageBytes(const DgsLayout& layout, DgsRange range) {
  const uint64_t pieces = layout.Pieces(range).size();
  return kHeader + pieces * sizeof(collectives::wire::FrameHeader) +
         uint64_t{range.size()} * sizeof(float);
}

}  // namespace gradex::ps
