// Data-plane wire frames: a fixed little-endian header and a payload, several
// frames per message. Every received frame is validated before use; a bad
// frame is an error Status and a counter, never a crash or a wrong sum.
//   frame.cc          the header, sizes and encoders
//   frame_decode.cc   the validating decoders
//   frame_message.cc  passes over a whole message: senders, finiteness
//   frame_errors.h    why a frame was refused, counted by reason
//   frame_blame.h     the peer that sent the first refused frame
#ifndef GRADEX_COLLECTIVES_WIRE_FRAME_H_
#define GRADEX_COLLECTIVES_WIRE_FRAME_H_

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "collectives/wire/frame_blame.h"
#include "collectives/wire/frame_errors.h"
#include "kernels/sparse.h"
#include "transport/transport.h"

namespace gradex::collectives::wire {

static_assert(std::endian::native == std::endian::little, "frames are little-endian structs");

inline constexpr uint32_t kFrameMagic = 0x58445247;  // "GRDX"
// 2: the sender's rank in the header. 3: a sparse frame may carry -0.0f (a
// sum that cancelled, kernels::IsPresent); +0 is never sent.
inline constexpr uint16_t kFrameVersion = 3;

enum FrameFlags : uint16_t {
  kFrameDense = 1,   // payload: (end - begin) float32 values
  kFrameSparse = 2,  // payload: count uint32 indices, then count float32 values
  // With kFrameDense: a QSGD payload (kernels/qsgd.h).
  kFrameQuantized = 4,
};

// An algorithm's stable wire number: its catalog id (catalog/catalog.h). The
// values come from the catalog only; 0 is no algorithm.
enum class AlgorithmId : uint16_t {};

// The catalog id of `name`, or AlgorithmId{0} when the catalog lacks it.
AlgorithmId CatalogId(std::string_view name);

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint64_t job_id;
  uint32_t epoch;
  uint16_t algorithm;
  uint16_t phase;
  uint64_t step;
  uint32_t block_begin;  // element range [begin, end) the payload covers
  uint32_t block_end;
  uint32_t count;   // entries in the payload
  uint32_t sender;  // the sending rank; receivers check it against the peer they expect
};
#pragma pack(pop)
static_assert(sizeof(FrameHeader) == 48);

// What the sender stamps and the receiver expects.
struct FrameMeta {
  uint64_t job_id = 0;
  uint32_t epoch = 0;
  uint64_t step = 0;
  AlgorithmId algorithm{};
  uint16_t phase = 0;
  uint32_t sender = 0;  // the rank that stamps the frames
  // Receiving only: the peer the message came from (-1: unknown) and where a
  // refusal of its frames is recorded (null: nowhere).
  int from = -1;
  FrameBlame* blame = nullptr;
  // Receiving only: NaN and infinite values are refused as bad frames (the
  // rule every rank of the epoch agreed; honest senders then send none).
  bool refuse_nonfinite = false;
};

struct BlockRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t size() const { return end - begin; }
};

// A block the receiver expects next in a message, and the most entries a
// sparse frame for it may carry.
struct ExpectedBlock {
  BlockRange range;
  uint32_t capacity = 0;
};

// The header every encoder writes: the call's identity, the block, the flags
// and the entry count.
FrameHeader MakeFrameHeader(const FrameMeta& meta, BlockRange range, uint16_t flags,
                            uint32_t count);

// Bytes a frame for `nnz` entries of a block of `size` elements takes on the
// wire: sparse or dense, whichever is smaller (SparCML's switch).
uint64_t FrameBytes(uint32_t size, uint64_t nnz);
// The most bytes a message of frames for `blocks` takes when every block
// holds at most its capacity: what a receive of it is capped at (Link).
size_t ExpectedMessageBytes(std::span<const ExpectedBlock> blocks);

// Appends one frame for a sparse block (dense encoding when smaller).
void AppendBlockFrame(const FrameMeta& meta, BlockRange range, kernels::SparseView block,
                      transport::Bytes* out);
// Appends one dense frame of range.size() values.
void AppendDenseFrame(const FrameMeta& meta, BlockRange range, const float* values,
                      transport::Bytes* out);

// The rank that put a frame on the link: stamped on every frame of a message
// as it is sent (a forwarded frame carries the last hop, e.g. SparCML's
// split gather), and checked against the peer the receive named as it
// arrives, so a frame routed from the wrong peer (a replay from another
// exchange, a misdelivery) is a clear error and a counter. Headers are read
// as DecodeSparseBlocks reads them (magic, version, lengths).
absl::Status StampFrameSenders(transport::Bytes* message, uint32_t sender);
absl::Status CheckFrameSenders(const transport::Bytes& message, uint32_t expected);

// Before a message goes out where the epoch refuses non-finite values: a NaN
// or infinite value in it (not a QSGD payload) can only be a sum this rank
// computed that overflowed, since every value it received was finite. It
// fails here, DATA_LOSS naming the element, so no honest rank forwards one
// and gets blamed for it.
absl::Status CheckFramesFinite(const transport::Bytes& message);
// How such a failure (and the call frame's own check of a result) begins.
inline constexpr char kSumOverflowed[] = "the sum overflowed to a non-finite value";
bool IsSumOverflow(const absl::Status& s);

// Parses a message holding exactly one frame per expected block, in order.
// Dense frames decode to their nonzeros. Indices are validated (sorted,
// unique, inside the block), counts against capacity, lengths exactly.
absl::Status DecodeSparseBlocks(const transport::Bytes& message, const FrameMeta& meta,
                                std::span<const ExpectedBlock> expected,
                                std::vector<kernels::SparseVec>* out);

// Parses a message of one dense frame for `range` and adds (accumulate) or
// copies its values into out[0 .. range.size()).
absl::Status DecodeDenseBlock(const transport::Bytes& message, const FrameMeta& meta,
                              BlockRange range, bool accumulate, float* out);

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_FRAME_H_
