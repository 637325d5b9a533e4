#include "collectives/frame.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "kernels/qsgd.h"

namespace gradex {
namespace {

constexpr int kNumErrors = static_cast<int>(FrameError::kCount);
std::atomic<uint64_t> g_errors[kNumErrors];

absl::Status Reject(FrameError e, std::string_view detail) {
  g_errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
  return absl::DataLossError(
      absl::StrCat("bad frame (", std::string(FrameErrorName(e)), "): ", std::string(detail)));
}

void Append(Bytes* out, const void* p, size_t n) {
  if (n == 0) return;
  // insert copies once; resize would zero the room first (a second pass).
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

// Reads and checks one header at `*offset`; on success advances past it and
// returns the payload length the header implies.
absl::Status ReadHeader(const Bytes& m, size_t* offset, const FrameMeta& meta,
                        const ExpectedBlock& want, FrameHeader* h, size_t* payload) {
  if (m.size() - *offset < sizeof(FrameHeader)) {
    return Reject(FrameError::kTruncated, absl::StrCat("message of ", m.size(),
                                                       " bytes ends inside a header at ", *offset));
  }
  std::memcpy(h, m.data() + *offset, sizeof(FrameHeader));
  if (h->magic != kFrameMagic) return Reject(FrameError::kBadMagic, absl::StrCat(h->magic));
  if (h->version != kFrameVersion) return Reject(FrameError::kBadVersion, absl::StrCat(h->version));
  if (h->job_id != meta.job_id) {
    return Reject(FrameError::kWrongJob, absl::StrCat(h->job_id, " != ", meta.job_id));
  }
  if (h->epoch != meta.epoch) {
    return Reject(FrameError::kWrongEpoch, absl::StrCat(h->epoch, " != ", meta.epoch));
  }
  if (h->step != meta.step) {
    return Reject(FrameError::kWrongStep, absl::StrCat(h->step, " != ", meta.step));
  }
  if (h->algorithm != static_cast<uint16_t>(meta.algorithm)) {
    return Reject(FrameError::kWrongAlgorithm, absl::StrCat(h->algorithm));
  }
  if (h->phase != meta.phase) {
    return Reject(FrameError::kWrongPhase, absl::StrCat(h->phase, " != ", meta.phase));
  }
  if (h->block_begin != want.range.begin || h->block_end != want.range.end) {
    return Reject(FrameError::kWrongBlock,
                  absl::StrCat("[", h->block_begin, ",", h->block_end, ") != [", want.range.begin,
                               ",", want.range.end, ")"));
  }
  const uint16_t kind = h->flags & (kFrameDense | kFrameSparse);
  const bool quantized = (h->flags & kFrameQuantized) != 0;
  if ((h->flags & ~(kFrameDense | kFrameSparse | kFrameQuantized)) != 0 ||
      (quantized && kind != kFrameDense)) {
    return Reject(FrameError::kBadFlags, absl::StrCat(h->flags));
  }
  if (kind == kFrameDense) {
    if (h->count != want.range.size()) {
      return Reject(FrameError::kBadLength,
                    absl::StrCat("dense count ", h->count, " != ", want.range.size()));
    }
    *payload = size_t{h->count} * sizeof(float);
    if (quantized) {
      // QSGD payload (kernels/qsgd.h): its length follows from the bits in
      // its first word, which must be 2, 4 or 8.
      uint32_t bits = 0;
      if (m.size() - *offset - sizeof(FrameHeader) < sizeof bits) {
        return Reject(FrameError::kTruncated, "quantized payload without its bits");
      }
      std::memcpy(&bits, m.data() + *offset + sizeof(FrameHeader), sizeof bits);
      if (bits > 8 || !kernels::QsgdBitsValid(static_cast<int>(bits))) {
        return Reject(FrameError::kBadFlags, absl::StrCat("quantized with ", bits, " bits"));
      }
      *payload = kernels::QsgdPayloadBytes(h->count, static_cast<int>(bits));
    }
  } else if (kind == kFrameSparse) {
    if (h->count > want.capacity) {
      return Reject(FrameError::kOverCapacity,
                    absl::StrCat("count ", h->count, " > capacity ", want.capacity));
    }
    *payload = size_t{h->count} * (sizeof(uint32_t) + sizeof(float));
  } else {
    return Reject(FrameError::kBadFlags, absl::StrCat(h->flags));
  }
  *offset += sizeof(FrameHeader);
  if (m.size() - *offset < *payload) {
    return Reject(FrameError::kTruncated,
                  absl::StrCat("payload of ", *payload, " bytes, ", m.size() - *offset, " left"));
  }
  return absl::OkStatus();
}

// Dequantizes a QSGD payload whose length ReadHeader has checked; the kernel
// validates the scales, codes and padding.
absl::Status DecodeQuantized(const uint8_t* p, size_t bytes, uint32_t count, float* out) {
  if (const char* why = kernels::QsgdDecode(p, bytes, count, out); why != nullptr) {
    return Reject(FrameError::kBadQuantized, why);
  }
  return absl::OkStatus();
}

}  // namespace

AlgorithmId CatalogId(std::string_view name) {
  const catalog::AlgorithmSpec* spec = catalog::Find(name);
  return AlgorithmId{spec == nullptr ? uint16_t{0} : spec->id};
}

FrameHeader MakeFrameHeader(const FrameMeta& meta, BlockRange range, uint16_t flags,
                            uint32_t count) {
  FrameHeader h{};
  h.magic = kFrameMagic;
  h.version = kFrameVersion;
  h.flags = flags;
  h.job_id = meta.job_id;
  h.epoch = meta.epoch;
  h.algorithm = static_cast<uint16_t>(meta.algorithm);
  h.phase = meta.phase;
  h.step = meta.step;
  h.block_begin = range.begin;
  h.block_end = range.end;
  h.count = count;
  h.sender = meta.sender;
  return h;
}

uint64_t FrameBytes(uint32_t size, uint64_t nnz) {
  uint64_t sparse = nnz * (sizeof(uint32_t) + sizeof(float));
  uint64_t dense = uint64_t{size} * sizeof(float);
  return sizeof(FrameHeader) + (dense < sparse ? dense : sparse);
}

size_t ExpectedMessageBytes(std::span<const ExpectedBlock> blocks) {
  uint64_t total = 0;
  for (const ExpectedBlock& b : blocks) total += FrameBytes(b.range.size(), b.capacity);
  return static_cast<size_t>(total);
}

void AppendBlockFrame(const FrameMeta& meta, BlockRange range, kernels::SparseView block,
                      Bytes* out) {
  // Only nonzeros go on the wire, in either encoding, so that a receiver's
  // copy of a block is the same whichever encoding the sender picked.
  size_t nnz = 0;
  for (size_t i = 0; i < block.nnz; ++i) nnz += block.val[i] != 0.0f;
  const uint64_t sparse_bytes = uint64_t{nnz} * 8;
  const uint64_t dense_bytes = uint64_t{range.size()} * 4;
  out->reserve(out->size() + sizeof(FrameHeader) + std::min(sparse_bytes, dense_bytes));
  if (dense_bytes < sparse_bytes) {
    FrameHeader h = MakeFrameHeader(meta, range, kFrameDense, range.size());
    Append(out, &h, sizeof h);
    size_t at = out->size();
    out->resize(at + dense_bytes, 0);
    float* dense = reinterpret_cast<float*>(out->data() + at);
    for (size_t i = 0; i < block.nnz; ++i) dense[block.idx[i] - range.begin] = block.val[i];
    return;
  }
  FrameHeader h = MakeFrameHeader(meta, range, kFrameSparse, static_cast<uint32_t>(nnz));
  Append(out, &h, sizeof h);
  if (nnz == block.nnz) {
    Append(out, block.idx, nnz * sizeof(uint32_t));
    Append(out, block.val, nnz * sizeof(float));
    return;
  }
  size_t at = out->size();
  out->resize(at + nnz * 8);
  uint32_t* idx = reinterpret_cast<uint32_t*>(out->data() + at);
  float* val = reinterpret_cast<float*>(out->data() + at + nnz * 4);
  for (size_t i = 0, j = 0; i < block.nnz; ++i) {
    if (block.val[i] == 0.0f) continue;
    idx[j] = block.idx[i];
    val[j++] = block.val[i];
  }
}

void AppendDenseFrame(const FrameMeta& meta, BlockRange range, const float* values, Bytes* out) {
  FrameHeader h = MakeFrameHeader(meta, range, kFrameDense, range.size());
  out->reserve(out->size() + sizeof h + range.size() * sizeof(float));
  Append(out, &h, sizeof h);
  Append(out, values, range.size() * sizeof(float));
}

namespace {

// NaN or infinite values, where the epoch refuses them.
absl::Status CheckFinite(const FrameMeta& meta, const float* v, size_t n, uint32_t block_begin) {
  if (!meta.refuse_nonfinite) return absl::OkStatus();
  if (const size_t i = kernels::FirstNonFinite(v, n); i < n) {
    return Reject(FrameError::kNonFinite,
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

absl::Status DecodeSparseBlocksImpl(const Bytes& message, const FrameMeta& meta,
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
            return Reject(
                FrameError::kIndexOutOfRange,
                absl::StrCat("index ", i, " outside [", h.block_begin, ",", h.block_end, ")"));
          }
        }
        return Reject(FrameError::kUnsortedIndices, "indices not strictly increasing");
      }
      if (absl::Status f = CheckFinite(meta, v.val.data(), v.nnz(), h.block_begin); !f.ok()) {
        return f;
      }
    }
    offset += payload;
  }
  if (offset != message.size()) {
    return Reject(FrameError::kBadLength,
                  absl::StrCat(message.size() - offset, " trailing bytes after the last frame"));
  }
  return absl::OkStatus();
}

absl::Status DecodeDenseBlockImpl(const Bytes& message, const FrameMeta& meta, BlockRange range,
                                  bool accumulate, float* out) {
  size_t offset = 0;
  FrameHeader h;
  size_t payload = 0;
  ExpectedBlock want{range, range.size()};
  absl::Status s = ReadHeader(message, &offset, meta, want, &h, &payload);
  if (!s.ok()) return s;
  if (!(h.flags & kFrameDense)) return Reject(FrameError::kBadFlags, "expected a dense frame");
  if (offset + payload != message.size()) {
    return Reject(FrameError::kBadLength, "trailing bytes after the dense frame");
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

absl::Status DecodeSparseBlocks(const Bytes& message, const FrameMeta& meta,
                                std::span<const ExpectedBlock> expected,
                                std::vector<kernels::SparseVec>* out) {
  return Blamed(DecodeSparseBlocksImpl(message, meta, expected, out), meta);
}

absl::Status DecodeDenseBlock(const Bytes& message, const FrameMeta& meta, BlockRange range,
                              bool accumulate, float* out) {
  return Blamed(DecodeDenseBlockImpl(message, meta, range, accumulate, out), meta);
}

void FrameBlame::Blame(int peer, std::string why) {
  absl::MutexLock lock(&mu_);
  if (peer_ >= 0) return;
  peer_ = peer;
  why_ = std::move(why);
}

int FrameBlame::peer() const {
  absl::MutexLock lock(&mu_);
  return peer_;
}

std::string FrameBlame::why() const {
  absl::MutexLock lock(&mu_);
  return why_;
}

void FrameBlame::Clear() {
  absl::MutexLock lock(&mu_);
  peer_ = -1;
  why_.clear();
}

namespace {

// Walks the frames of a message, handing each header and its offset to
// `fn`. A message that does not parse (magic, version, flags, lengths) ends
// the walk with OUT_OF_RANGE, uncounted: the decoder rejects it with the
// precise reason.
template <typename Fn>
absl::Status ForEachFrame(const Bytes& m, Fn&& fn) {
  const absl::Status malformed = absl::OutOfRangeError("malformed message");
  size_t offset = 0;
  while (offset < m.size()) {
    FrameHeader h;
    if (m.size() - offset < sizeof(FrameHeader)) return malformed;
    std::memcpy(&h, m.data() + offset, sizeof(FrameHeader));
    if (h.magic != kFrameMagic || h.version != kFrameVersion) return malformed;
    if (absl::Status s = fn(offset, h); !s.ok()) return s;
    size_t payload = 0;
    const size_t body = m.size() - offset - sizeof(FrameHeader);
    if ((h.flags & kFrameSparse) != 0) {
      payload = size_t{h.count} * (sizeof(uint32_t) + sizeof(float));
    } else if ((h.flags & kFrameQuantized) != 0) {
      uint32_t bits = 0;
      if (body < sizeof bits) return malformed;
      std::memcpy(&bits, m.data() + offset + sizeof(FrameHeader), sizeof bits);
      if (bits > 8 || !kernels::QsgdBitsValid(static_cast<int>(bits))) return malformed;
      payload = kernels::QsgdPayloadBytes(h.count, static_cast<int>(bits));
    } else {
      payload = size_t{h.count} * sizeof(float);
    }
    if (body < payload) return malformed;
    offset += sizeof(FrameHeader) + payload;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StampFrameSenders(Bytes* m, uint32_t sender) {
  absl::Status s = ForEachFrame(*m, [&](size_t offset, const FrameHeader&) {
    std::memcpy(m->data() + offset + offsetof(FrameHeader, sender), &sender, sizeof sender);
    return absl::OkStatus();
  });
  if (s.ok()) return s;
  return absl::InternalError("sending a message that is not frames");
}

absl::Status CheckFrameSenders(const Bytes& m, uint32_t expected) {
  absl::Status s = ForEachFrame(m, [&](size_t, const FrameHeader& h) {
    if (h.sender == expected) return absl::OkStatus();
    return Reject(FrameError::kWrongSender,
                  absl::StrCat("frame from rank ", h.sender, ", received from rank ", expected));
  });
  return s.code() == absl::StatusCode::kOutOfRange ? absl::OkStatus() : s;
}

bool IsSumOverflow(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDataLoss &&
         std::string_view(s.message().data(), s.message().size()).find(kSumOverflowed) !=
             std::string_view::npos;
}

absl::Status CheckFramesFinite(const Bytes& m) {
  absl::Status s = ForEachFrame(m, [&](size_t offset, const FrameHeader& h) {
    if ((h.flags & kFrameQuantized) != 0) return absl::OkStatus();
    const bool sparse = (h.flags & kFrameSparse) != 0;
    const uint8_t* body = m.data() + offset + sizeof(FrameHeader);
    const uint8_t* values = sparse ? body + size_t{h.count} * sizeof(uint32_t) : body;
    if (const size_t i = kernels::FirstNonFinite(reinterpret_cast<const float*>(values), h.count);
        i < h.count) {
      uint32_t element = h.block_begin + i;
      if (sparse) std::memcpy(&element, body + size_t{i} * sizeof(uint32_t), sizeof element);
      return absl::DataLossError(absl::StrCat(
          kSumOverflowed, " at element ", element,
          " before it was sent (every value summed was finite: this epoch refuses NaN and "
          "infinite ones); every rank fails this step and keeps its contribution"));
    }
    return absl::OkStatus();
  });
  return s.code() == absl::StatusCode::kOutOfRange ? absl::OkStatus() : s;
}

std::string_view FrameErrorName(FrameError e) {
  switch (e) {
    case FrameError::kTruncated:
      return "truncated";
    case FrameError::kBadMagic:
      return "bad_magic";
    case FrameError::kBadVersion:
      return "bad_version";
    case FrameError::kWrongJob:
      return "wrong_job";
    case FrameError::kWrongEpoch:
      return "wrong_epoch";
    case FrameError::kWrongStep:
      return "wrong_step";
    case FrameError::kWrongAlgorithm:
      return "wrong_algorithm";
    case FrameError::kWrongPhase:
      return "wrong_phase";
    case FrameError::kWrongBlock:
      return "wrong_block";
    case FrameError::kBadFlags:
      return "bad_flags";
    case FrameError::kOverCapacity:
      return "over_capacity";
    case FrameError::kBadLength:
      return "bad_length";
    case FrameError::kIndexOutOfRange:
      return "index_out_of_range";
    case FrameError::kUnsortedIndices:
      return "unsorted_indices";
    case FrameError::kBadQuantized:
      return "bad_quantized";
    case FrameError::kWrongSender:
      return "wrong_sender";
    case FrameError::kNonFinite:
      return "non_finite";
    case FrameError::kCount:
      break;
  }
  return "unknown";
}

std::array<uint64_t, static_cast<int>(FrameError::kCount)> FrameErrorCounts() {
  std::array<uint64_t, kNumErrors> c{};
  for (int i = 0; i < kNumErrors; ++i) c[i] = g_errors[i].load(std::memory_order_relaxed);
  return c;
}

uint64_t TotalFrameErrors() {
  uint64_t t = 0;
  for (uint64_t c : FrameErrorCounts()) t += c;
  return t;
}

}  // namespace gradex
