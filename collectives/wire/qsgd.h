// QSGD on the wire: quantized dense frames, reproducible rounding seeds and
// the error feedback that keeps conservation exact up to float rounding.
#ifndef GRADEX_COLLECTIVES_WIRE_QSGD_H_
#define GRADEX_COLLECTIVES_WIRE_QSGD_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collectives/wire/frame.h"
#include "kernels/sparse.h"

namespace gradex::collectives::wire {

// 0 (off), 2, 4 or 8.
absl::Status ValidateQuantizeBits(int bits);

// Seed of the stochastic rounding of one frame: a hash of the call's
// identity (job, epoch, step, algorithm, phase), the quantizing rank and the
// frame's segment, so a rerun with the same inputs sends the same bytes.
uint64_t QsgdSeed(const FrameMeta& meta, int rank, BlockRange range);

// Appends a quantized dense frame of values[0 .. range.size()) and writes the
// dequantized values (exactly what a receiver decodes) to `decoded`.
void AppendQuantizedFrame(const FrameMeta& meta, BlockRange range, const float* values, int bits,
                          uint64_t seed, transport::Bytes* out, std::vector<float>* decoded);

// Bytes of a quantized frame for `size` values (header included).
uint64_t QuantizedFrameBytes(uint32_t size, int bits);

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_QSGD_H_
