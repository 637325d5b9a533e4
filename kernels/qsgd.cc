#include "kernels/qsgd.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gradex::kernels {
namespace {

constexpr size_t kPrefixBytes = 8;

size_t Buckets(size_t n) { return (n + kQsgdBucket - 1) / kQsgdBucket; }
size_t Words(size_t n, int bits) { return (n * bits + 31) / 32; }
int Levels(int bits) { return (1 << (bits - 1)) - 1; }

uint64_t SplitMix(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

bool QsgdBitsValid(int bits) { return bits == 2 || bits == 4 || bits == 8; }

size_t QsgdPayloadBytes(size_t n, int bits) {
  return kPrefixBytes + 4 * Buckets(n) + 4 * Words(n, bits);
}

void QsgdEncode(const float* x, size_t n, int bits, uint64_t seed, uint8_t* out) {
  const uint32_t prefix[2] = {static_cast<uint32_t>(bits), kQsgdBucket};
  std::memcpy(out, prefix, sizeof prefix);
  uint8_t* scales = out + kPrefixBytes;
  uint8_t* codes = scales + 4 * Buckets(n);
  std::memset(codes, 0, 4 * Words(n, bits));
  const int s = Levels(bits);
  uint64_t state = seed;
  uint32_t word = 0;
  size_t word_at = 0;
  for (size_t b0 = 0; b0 < n; b0 += kQsgdBucket) {
    const size_t b1 = std::min(n, b0 + kQsgdBucket);
    float scale = 0.0f;
    // Non-finite values are left at level 0 (the caller's error feedback
    // keeps them in its residual) so that a scale is always finite.
    for (size_t i = b0; i < b1; ++i) {
      if (std::isfinite(x[i])) scale = std::max(scale, std::fabs(x[i]));
    }
    std::memcpy(scales + 4 * (b0 / kQsgdBucket), &scale, 4);
    const float step = QsgdStep(scale, bits);
    for (size_t i = b0; i < b1; ++i) {
      int level = 0;
      if (scale > 0.0f && std::isfinite(x[i])) {
        // v in [-s, s]: the lower level with probability 1 - frac, the upper
        // with probability frac, so E[level * step] = x.
        const float v = std::clamp(x[i] / step, static_cast<float>(-s), static_cast<float>(s));
        const float lo = std::floor(v);
        const float frac = v - lo;
        const float u = static_cast<float>(SplitMix(&state) >> 40) * 0x1p-24f;
        level = std::clamp(static_cast<int>(lo) + (u < frac ? 1 : 0), -s, s);
      }
      const size_t bit = i * bits;
      word |= static_cast<uint32_t>(level + s) << (bit % 32);
      if (bit % 32 + bits == 32 || i + 1 == n) {
        std::memcpy(codes + 4 * word_at++, &word, 4);
        word = 0;
      }
    }
  }
}

const char* QsgdDecode(const uint8_t* in, size_t bytes, size_t n, float* out) {
  if (bytes < kPrefixBytes) return "payload shorter than its prefix";
  uint32_t prefix[2];
  std::memcpy(prefix, in, sizeof prefix);
  const int bits = static_cast<int>(prefix[0]);
  if (prefix[0] > 8 || !QsgdBitsValid(bits)) return "bits not in {2, 4, 8}";
  if (prefix[1] != kQsgdBucket) return "bucket size is not 1024";
  if (bytes != QsgdPayloadBytes(n, bits)) return "payload length does not match the count";
  const uint8_t* scales = in + kPrefixBytes;
  const uint8_t* codes = scales + 4 * Buckets(n);
  const int s = Levels(bits);
  const uint32_t mask = (1u << bits) - 1;
  for (size_t b0 = 0; b0 < n; b0 += kQsgdBucket) {
    float scale;
    std::memcpy(&scale, scales + 4 * (b0 / kQsgdBucket), 4);
    if (!(scale >= 0.0f) || std::isinf(scale)) return "scale not finite and >= 0";
    const float step = QsgdStep(scale, bits);
    const size_t b1 = std::min(n, b0 + kQsgdBucket);
    for (size_t i = b0; i < b1; ++i) {
      const size_t bit = i * bits;
      uint32_t word;
      std::memcpy(&word, codes + 4 * (bit / 32), 4);
      const uint32_t code = (word >> (bit % 32)) & mask;
      if (code > static_cast<uint32_t>(2 * s)) return "code above the top level";
      out[i] = static_cast<float>(static_cast<int>(code) - s) * step;
    }
  }
  // The fields past the last value must be zero (every byte is accounted for).
  const size_t used = n * bits;
  if (used % 32 != 0) {
    uint32_t last;
    std::memcpy(&last, codes + 4 * (used / 32), 4);
    if ((last >> (used % 32)) != 0) return "nonzero padding after the last code";
  }
  return nullptr;
}

}  // namespace gradex::kernels
