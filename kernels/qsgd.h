// QSGD stochastic quantization (SparCML's low-precision layer): values in
// buckets of kQsgdBucket, each bucket scaled by its max |x|, every value
// rounded stochastically to one of 2s+1 levels (s = 2^(bits-1) - 1), so that
// decode(encode(x)) is unbiased: E = x, variance (scale/s)^2 p(1-p) per value.
//
// Payload layout (little-endian, a multiple of 4 bytes):
//   uint32 bits (2, 4 or 8), uint32 bucket (kQsgdBucket),
//   ceil(n / bucket) float32 scales,
//   ceil(n * bits / 32) uint32 words of codes: value i is the bits-wide field
//   at bit (i * bits) % 32 of word (i * bits) / 32, code = level + s; unused
//   high bits of the last word are zero.
#ifndef GRADEX_KERNELS_QSGD_H_
#define GRADEX_KERNELS_QSGD_H_

#include <cstddef>
#include <cstdint>

namespace gradex::kernels {

inline constexpr uint32_t kQsgdBucket = 1024;

// True for the supported widths 2, 4 and 8.
bool QsgdBitsValid(int bits);

// Bytes of the payload for n values at `bits` (prefix included).
size_t QsgdPayloadBytes(size_t n, int bits);

// Encodes x[0..n) into out (QsgdPayloadBytes(n, bits) bytes, any alignment).
// The rounding draws come from a splitmix64 stream seeded with `seed`, so
// the same (x, bits, seed) always gives the same bytes.
void QsgdEncode(const float* x, size_t n, int bits, uint64_t seed, uint8_t* out);

// Decodes a payload of exactly QsgdPayloadBytes(n, bits) bytes for n values
// into out. Validates the prefix (bits, bucket), every scale (finite, >= 0),
// every code (<= 2s) and the zero padding. Returns nullptr on success, else
// what was wrong (out is then unspecified).
const char* QsgdDecode(const uint8_t* in, size_t bytes, size_t n, float* out);

// The step between levels of a bucket with this scale (the quantization
// error of one value is below it).
inline float QsgdStep(float scale, int bits) {
  return scale / static_cast<float>((1 << (bits - 1)) - 1);
}

}  // namespace gradex::kernels

#endif  // GRADEX_KERNELS_QSGD_H_
