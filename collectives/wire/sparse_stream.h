// SparCML's sparse stream: one segment [begin, end) of a gradient held sparse
// (COO) until its entries pass δ = N·isize/(c+isize), then dense. With float32
// values (isize = 4) and uint32 indices (c = 4), δ = N/2: past it the COO form
// is larger than the dense one. The form on the wire is the frame's
// dense/sparse flag (collectives/wire/frame.h); a dense stream may also go out
// QSGD-quantized (kFrameDense | kFrameQuantized).
#ifndef GRADEX_COLLECTIVES_WIRE_SPARSE_STREAM_H_
#define GRADEX_COLLECTIVES_WIRE_SPARSE_STREAM_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "collectives/wire/frame.h"
#include "kernels/sparse.h"

namespace gradex::collectives::wire {

// δ of a segment of `size` elements, as an entry count: the stream stays
// sparse while entries <= δ.
inline double SparseStreamDelta(uint32_t size) {
  constexpr double kIsize = sizeof(float), kC = sizeof(uint32_t);
  return size * kIsize / (kC + kIsize);
}

enum class StreamPolicy {
  kStatic,   // SSAR: the result is known to stay sparse; never switches
  kDynamic,  // DSAR: switches to dense when entries pass δ (and stays dense)
};

// What the volume model needs of one frame: its entries when sparse, or this
// mark when dense (its size then comes from the schedule).
inline constexpr uint64_t kDenseFrameMark = ~uint64_t{0};

class SparseStream {
 public:
  SparseStream() = default;
  SparseStream(BlockRange range, StreamPolicy policy) : range_(range), policy_(policy) {}

  BlockRange range() const { return range_; }
  bool dense() const { return dense_; }
  // Entries held: COO entries (explicit zeros included) or the segment size.
  size_t entries() const { return dense_ ? range_.size() : sparse_.nnz(); }

  // Replaces the contents with `v` (sorted, unique, inside the range).
  void Assign(kernels::SparseVec v);
  // this += other, element by element (a + b, so both orders give the same
  // bits). Switches to dense when the sum passes δ (dynamic policy).
  void Add(kernels::SparseView other);
  // Switches to dense now, whatever the entries (DSAR's dense all-gather).
  void Densify();

  // Appends one frame: dense form as a dense frame (QSGD-quantized when
  // quantize_bits > 0: the stream then holds the dequantized values every
  // receiver will see, and `error` gets x - Q(x) as global-index COO for the
  // caller's error feedback); sparse form as a sparse frame of its nonzeros.
  // Returns the frame's mark for the volume model.
  uint64_t AppendFrame(const FrameMeta& meta, int quantize_bits, uint64_t seed,
                       transport::Bytes* out, kernels::SparseVec* error);

  // The nonzeros, global indices (what every receiver of the frame decodes).
  void NonZeros(kernels::SparseVec* out) const;

  const kernels::SparseVec& sparse() const { return sparse_; }
  const std::vector<float>& dense_values() const { return dense_values_; }

 private:
  void MaybeSwitch();

  BlockRange range_;
  StreamPolicy policy_ = StreamPolicy::kDynamic;
  bool dense_ = false;
  kernels::SparseVec sparse_;
  std::vector<float> dense_values_;  // range.size() values when dense
  kernels::SparseVec scratch_;
};

// Appends a sparse frame of the nonzeros of `v` whatever its size (static
// streams never switch). Returns the entries written.
uint64_t AppendSparseFrame(const FrameMeta& meta, BlockRange range, kernels::SparseView v,
                           transport::Bytes* out);

// Bytes of a frame with mark `mark` for a segment of `size` elements, dense
// frames quantized at `quantize_bits` (0: plain float32).
uint64_t StreamFrameBytes(uint32_t size, uint64_t mark, int quantize_bits);

// A dense frame carries no count, so the frame layer checks only sparse
// frames against a capacity: this holds every decoded block's nonzeros to
// its expected capacity (DATA_LOSS otherwise).
absl::Status CheckDecodedCapacity(const std::vector<kernels::SparseVec>& blocks,
                                  std::span<const ExpectedBlock> expected);

// Splits an already validated message into its frames: byte spans and marks.
void SplitFrames(const transport::Bytes& message, std::vector<std::pair<size_t, size_t>>* spans,
                 std::vector<uint64_t>* marks);

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_SPARSE_STREAM_H_
