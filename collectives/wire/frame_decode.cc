// The validating decoders of collectives/wire/frame.h: every field of a received
// frame is checked against what the receiver expects before a value is read.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/wire/frame.h"
#include "collectives/wire/frame_walk.h"
#include "kernels/qsgd.h"

namespace gradex::collectives::wire {
namespace {

// Reads and checks one header at `*offset` (its shape by ReadFrameAt, then
// every field against `meta` and `want`); on success advances past it and
// returns the payload length the header implies.
absl::Status ReadHeader(const transport::Bytes& m, size_t* offset, const FrameMeta& meta,
                        const ExpectedBlock& want, FrameHeader* h, size_t* payload) {
  FrameAt f;
  const FrameShape shape = ReadFrameAt(m, *offset, &f);
  *h = f.header;
  switch (shape) {
    case FrameShape::kOk:
      break;
    case FrameShape::kTruncatedHeader:
      return RejectFrame(
          FrameError::kTruncated,
          absl::StrCat("message of ", m.size(), " bytes ends inside a header at ", *offset));
    case FrameShape::kBadMagic:
      return RejectFrame(FrameError::kBadMagic, absl::StrCat(h->magic));
    case FrameShape::kBadVersion:
      return RejectFrame(FrameError::kBadVersion, absl::StrCat(h->version));
    case FrameShape::kBadFlags:
      return RejectFrame(FrameError::kBadFlags, absl::StrCat(h->flags));
    case FrameShape::kNoBits:
      return RejectFrame(FrameError::kTruncated, "quantized payload without its bits");
    case FrameShape::kBadBits: {
      uint32_t bits = 0;
      std::memcpy(&bits, m.data() + f.body(), sizeof bits);
      return RejectFrame(FrameError::kBadFlags, absl::StrCat("quantized with ", bits, " bits"));
    }
  }
  if (h->job_id != meta.job_id) {
    return RejectFrame(FrameError::kWrongJob, absl::StrCat(h->job_id, " != ", meta.job_id));
  }
  if (h->epoch != meta.epoch) {
    return RejectFrame(FrameError::kWrongEpoch, absl::StrCat(h->epoch, " != ", meta.epoch));
  }
  if (h->step != meta.step) {
    return RejectFrame(FrameError::kWrongStep, absl::StrCat(h->step, " != ", meta.step));
  }
  if (h->algorithm != static_cast<uint16_t>(meta.algorithm)) {
    return RejectFrame(FrameError::kWrongAlgorithm, absl::StrCat(h->algorithm));
  }
  if (h->phase != meta.phase) {
    return RejectFrame(FrameError::kWrongPhase, absl::StrCat(h->phase, " != ", meta.phase));
  }
  if (h->block_begin != want.range.begin || h->block_end != want.range.end) {
    return RejectFrame(FrameError::kWrongBlock,
                       absl::StrCat("[", h->block_begin, ",", h->block_end, ") != [",
                                    want.range.begin, ",", want.range.end, ")"));
  }
  if ((h->flags & kFrameDense) != 0 && h->count != want.range.size()) {
    return RejectFrame(FrameError::kBadLength,
                       absl::StrCat("dense count ", h->count, " != ", want.range.size()));
  }
  if ((h->flags & kFrameSparse) != 0 && h->count > want.capacity) {
    return RejectFrame(FrameError::kOverCapacity,
                       absl::StrCat("count ", h->count, " > capacity ", want.capacity));
  }
  *payload = f.payload;
  *offset = f.body();
  if (!f.fits()) {
    return RejectFrame(FrameError::kTruncated,
                       absl::StrCat("payload of ", f.payload, " bytes, ", f.body_left, " left"));
  }
  return absl::OkStatus();
}

// Dequantizes a QSGD payload whose length ReadHeader has checked; the kernel
// validates the scales, codes and padding.
absl::Status DecodeQuantized(const uint8_t* p, size_t bytes, uint32_t count, float* out) {
  if (const char* why = kernels::QsgdDecode(p, bytes, count, out); why != nullptr) {
    return RejectFrame(FrameError::kBadQuantized, why);
  }
  return absl::OkStatus();
}

// NaN or infinite values, where the epoch refuses them.
absl::Status CheckFinite(const FrameMeta& meta, const float* v, size_t n, uint32_t block_begin) {
  if (!meta.refuse_nonfinite) return absl::OkStatus();
  if (const size_t i = kernels::FirstNonFinite(v, n); i < n) {
    return RejectFrame(FrameError::kNonFinite,
                       absl::StrCat("value ", v[i], " in the block from ", block_begin,
                                    " (this epoch refuses NaN and infinite values)"));
  }
  return absl::OkStatus();
}

// A refusal of a message from meta.from is recorded against it.
absl::Status Blamed(absl::Status s, const FrameMeta& meta) {
  if (!s.ok() && meta.blame != nullptr && meta.from >= 0)
    meta.blame->Blame(meta.from, std::string(s.message()));
  return s;
}

absl::Status DecodeSparseBlocksImpl(const transport::Bytes& message, const FrameMeta& meta,
                                    std::span<const ExpectedBlock> expected,
                                    std::vector<kernels::SparseVec>* out) {
  out->resize(expected.size());
  size_t offset = 0;
  for (size_t b = 0; b < expected.size(); ++b) {
    FrameHeader h;
    size_t payload = 0;
    absl::Status s = ReadHeader(message, &offset, meta, expected[b], &h, &payload);
    if (!s.ok()) return s;
    kernels::SparseVec& v = (*out)[b];
    v.clear();
    const uint8_t* p = message.data() + offset;
    if (h.flags & kFrameQuantized) {
      std::vector<float> values(h.count);
      absl::Status q = DecodeQuantized(p, payload, h.count, values.data());
      if (!q.ok()) return q;
      if (absl::Status f = CheckFinite(meta, values.data(), h.count, h.block_begin); !f.ok()) {
        return f;
      }
      kernels::DenseToSparse(values.data(), h.count, h.block_begin, &v);
    } else if (h.flags & kFrameDense) {
      const float* dense = reinterpret_cast<const float*>(p);
      if (absl::Status f = CheckFinite(meta, dense, h.count, h.block_begin); !f.ok()) return f;
      kernels::DenseToSparse(dense, h.count, h.block_begin, &v);
    } else {
      v.idx.resize(h.count);
      v.val.resize(h.count);
      // An empty frame leaves data() null, and memcpy from/to null is undefined
      // even for 0 bytes (found by tests/fuzz/frame_fuzzer).
      if (h.count > 0) {
        std::memcpy(v.idx.data(), p, h.count * sizeof(uint32_t));
        std::memcpy(v.val.data(), p + h.count * sizeof(uint32_t), h.count * sizeof(float));
      }
      if (!kernels::IsSortedUniqueInRange(v.idx.data(), v.nnz(), h.block_begin, h.block_end)) {
        // Say which rule broke: a bound or the order.
        for (uint32_t i : v.idx) {
          if (i < h.block_begin || i >= h.block_end) {
            return RejectFrame(
                FrameError::kIndexOutOfRange,
                absl::StrCat("index ", i, " outside [", h.block_begin, ",", h.block_end, ")"));
          }
        }
        return RejectFrame(FrameError::kUnsortedIndices, "indices not strictly increasing");
      }
      if (absl::Status f = CheckFinite(meta, v.val.data(), v.nnz(), h.block_begin); !f.ok()) {
        return f;
      }
    }
    offset += payload;
  }
  if (offset != message.size()) {
    return RejectFrame(
        FrameError::kBadLength,
        absl::StrCat(message.size() - offset, " trailing bytes after the last frame"));
  }
  return absl::OkStatus();
}

absl::Status DecodeDenseBlockImpl(const transport::Bytes& message, const FrameMeta& meta,
                                  BlockRange range, bool accumulate, float* out) {
  size_t offset = 0;
  FrameHeader h;
  size_t payload = 0;
  ExpectedBlock want{range, range.size()};
  absl::Status s = ReadHeader(message, &offset, meta, want, &h, &payload);
  if (!s.ok()) return s;
  if (!(h.flags & kFrameDense)) return RejectFrame(FrameError::kBadFlags, "expected a dense frame");
  if (offset + payload != message.size()) {
    return RejectFrame(FrameError::kBadLength, "trailing bytes after the dense frame");
  }
  if (h.flags & kFrameQuantized) {
    std::vector<float> values(h.count);
    absl::Status q = DecodeQuantized(message.data() + offset, payload, h.count, values.data());
    if (!q.ok()) return q;
    if (absl::Status f = CheckFinite(meta, values.data(), h.count, range.begin); !f.ok()) return f;
    for (uint32_t i = 0; i < h.count; ++i) out[i] = accumulate ? out[i] + values[i] : values[i];
    return absl::OkStatus();
  }
  const float* v = reinterpret_cast<const float*>(message.data() + offset);
  // Checked before anything is written: a refused frame leaves `out` as it was.
  if (absl::Status f = CheckFinite(meta, v, h.count, range.begin); !f.ok()) return f;
  if (accumulate) {
    for (uint32_t i = 0; i < h.count; ++i) out[i] += v[i];
  } else if (payload > 0) {
    // An empty block may come with no buffer to write (memcpy from or to
    // null is undefined even for 0 bytes; found by tests/fuzz/frame_fuzzer).
    std::memcpy(out, v, payload);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeSparseBlocks(const transport::Bytes& message, const FrameMeta& meta,
                                std::span<const ExpectedBlock> expected,
                                std::vector<kernels::SparseVec>* out) {
  return Blamed(DecodeSparseBlocksImpl(message, meta, expected, out), meta);
}

absl::Status DecodeDenseBlock(const transport::Bytes& message, const FrameMeta& meta,
                              BlockRange range, bool accumulate, float* out) {
  return Blamed(DecodeDenseBlockImpl(message, meta, range, accumulate, out), meta);
}

}  // namespace gradex::collectives::wire
