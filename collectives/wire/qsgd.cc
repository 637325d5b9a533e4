#include "collectives/wire/qsgd.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/qsgd.h"

namespace gradex::collectives::wire {
namespace {

uint64_t Mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

}  // namespace

absl::Status ValidateQuantizeBits(int bits) {
  if (bits == 0 || kernels::QsgdBitsValid(bits)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("quantize_bits ", bits, " not in {0, 2, 4, 8}"));
}

uint64_t QsgdSeed(const FrameMeta& meta, int rank, BlockRange range) {
  uint64_t h = 0x5153474400000000ull;  // "QSGD"
  for (uint64_t x : {meta.job_id, uint64_t{meta.epoch}, meta.step,
                     uint64_t{static_cast<uint16_t>(meta.algorithm)}, uint64_t{meta.phase},
                     static_cast<uint64_t>(rank), uint64_t{range.begin}, uint64_t{range.end}}) {
    h = Mix(h, x);
  }
  return h;
}

void AppendQuantizedFrame(const FrameMeta& meta, BlockRange range, const float* values, int bits,
                          uint64_t seed, transport::Bytes* out, std::vector<float>* decoded) {
  const FrameHeader h = MakeFrameHeader(meta, range, kFrameDense | kFrameQuantized, range.size());
  const size_t payload = kernels::QsgdPayloadBytes(range.size(), bits);
  const size_t at = out->size();
  out->resize(at + sizeof h + payload);
  std::memcpy(out->data() + at, &h, sizeof h);
  uint8_t* p = out->data() + at + sizeof h;
  kernels::QsgdEncode(values, range.size(), bits, seed, p);
  decoded->resize(range.size());
  // Decoding our own bytes gives exactly what every receiver will hold.
  const char* why = kernels::QsgdDecode(p, payload, range.size(), decoded->data());
  (void)why;  // cannot fail on bytes QsgdEncode wrote
}

uint64_t QuantizedFrameBytes(uint32_t size, int bits) {
  return sizeof(FrameHeader) + kernels::QsgdPayloadBytes(size, bits);
}

}  // namespace gradex::collectives::wire
