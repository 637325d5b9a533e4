// The wire's shape, written once: where a frame's header and payload lie in
// a message. Every reader of frames finds them here (the validating decoders
// of frame_decode.cc, the link's passes over a message in frame_message.cc,
// SparCML's splitter in sparse_stream.cc, DGS's pieces in ps/dgs_frames.cc)
// and adds its own checks of what the fields mean.
#ifndef GRADEX_COLLECTIVES_WIRE_FRAME_WALK_H_
#define GRADEX_COLLECTIVES_WIRE_FRAME_WALK_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "collectives/wire/frame.h"

namespace gradex::collectives::wire {

// Why the bytes at an offset are not a frame.
enum class FrameShape {
  kOk,
  kTruncatedHeader,  // fewer bytes left than a header
  kBadMagic,
  kBadVersion,
  kBadFlags,  // not dense, sparse or dense + quantized
  kNoBits,    // a quantized payload without its bits word
  kBadBits,   // a quantized payload of other than 2, 4 or 8 bits
};

// One frame of a message.
struct FrameAt {
  FrameHeader header;
  size_t offset = 0;     // of the header
  size_t payload = 0;    // the payload's bytes, as the header implies them
  size_t body_left = 0;  // the message's bytes after the header
  bool fits() const { return payload <= body_left; }
  size_t body() const { return offset + sizeof(FrameHeader); }
  size_t end() const { return body() + payload; }
};

// Reads the frame at `offset` of `m`: its header, magic, version, flags and
// the payload length they imply (QSGD's from its bits word). Whether the
// payload fits is `fits()`, left to the caller so that it may first refuse
// a count for a more precise reason; no other field is checked.
FrameShape ReadFrameAt(std::span<const uint8_t> m, size_t offset, FrameAt* out);

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_FRAME_WALK_H_
