#include "collectives/wire/frame_walk.h"

#include <cstring>

#include "kernels/qsgd.h"

namespace gradex::collectives::wire {

FrameShape ReadFrameAt(std::span<const uint8_t> m, size_t offset, FrameAt* out) {
  out->offset = offset;
  if (offset > m.size() || m.size() - offset < sizeof(FrameHeader)) {
    return FrameShape::kTruncatedHeader;
  }
  FrameHeader& h = out->header;
  std::memcpy(&h, m.data() + offset, sizeof(FrameHeader));
  if (h.magic != kFrameMagic) return FrameShape::kBadMagic;
  if (h.version != kFrameVersion) return FrameShape::kBadVersion;
  out->body_left = m.size() - offset - sizeof(FrameHeader);
  const uint16_t kind = h.flags & (kFrameDense | kFrameSparse);
  const bool quantized = (h.flags & kFrameQuantized) != 0;
  if ((h.flags & ~(kFrameDense | kFrameSparse | kFrameQuantized)) != 0 ||
      (kind != kFrameDense && kind != kFrameSparse) || (quantized && kind != kFrameDense)) {
    return FrameShape::kBadFlags;
  }
  if (kind == kFrameSparse) {
    out->payload = size_t{h.count} * (sizeof(uint32_t) + sizeof(float));
  } else if (!quantized) {
    out->payload = size_t{h.count} * sizeof(float);
  } else {
    // QSGD (kernels/qsgd.h): the length follows from the bits in the
    // payload's first word.
    uint32_t bits = 0;
    if (out->body_left < sizeof bits) return FrameShape::kNoBits;
    std::memcpy(&bits, m.data() + out->body(), sizeof bits);
    if (bits > 8 || !kernels::QsgdBitsValid(static_cast<int>(bits))) return FrameShape::kBadBits;
    out->payload = kernels::QsgdPayloadBytes(h.count, static_cast<int>(bits));
  }
  return FrameShape::kOk;
}

}  // namespace gradex::collectives::wire
