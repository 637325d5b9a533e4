// The CPU top-k threshold: the radix select's histogram passes (pass 1 plain
// or with the accumulation fused in; passes 2 and 3 over the k-th entry's
// bucket) and FindTopKThreshold.
//
// Radix select on magnitude keys. A key (31 bits) is cut
// 11/11/9: the first pass histograms all n entries by their top bits, the
// later passes only the candidates of the bucket the k-th entry falls in.
#include <algorithm>
#include <cassert>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/compact.h"
#include "kernels/sparse.h"
#include "kernels/topk_radix.h"

namespace gradex::kernels::internal {
namespace {

// Pass 1 buckets: b(key) = (key + 2^20 - 1) >> 20, so bucket 0 holds exactly
// the zeros and bucket b >= 1 holds keys [((b-1) << 20) + 1, b << 20]; +Inf
// lands in 2040 and NaNs above it, where the walk never looks (NaN is never
// selected).
constexpr uint32_t kBias1 = (1u << kShift1) - 1;
static_assert(kBuckets1 == ((0x7fffffffu + kBias1) >> kShift1) + 1, "2049 buckets");
static_assert(kInfBucket1 == (0x7f800000u + kBias1) >> kShift1, "+Inf's bucket");
constexpr size_t kTopReal = (kInfKey + kBias1) >> kShift1;  // 2040

// Per-thread histogram scratch, on the heap: static TLS is carved out of every
// thread's stack, and 72 KB of thread_local arrays overflowed the 100 KB stacks
// of civetweb's threads (prometheus-cpp's metrics server) in the same process.
template <size_t kRows, size_t kCols>
uint32_t (&ThreadScratch())[kRows][kCols] {
  using Rows = uint32_t[kRows][kCols];
  static thread_local const std::unique_ptr<Rows[]> scratch(new Rows[1]);
  return scratch[0];
}

// Adds to h[0, bins) the count of bin(i) over i in [0, n). Four
// sub-histograms so that runs of equal bins (common: few exponents dominate)
// do not serialise on one counter; uint32 counters, flushed every 2^30
// entries. bin(i) may be >= bins (a spill column) and may write x[i].
template <size_t kCols, class Bin>
void CountInFours(size_t n, size_t bins, uint32_t (&sub)[4][kCols], const Bin& bin, size_t* h) {
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t end = std::min(n, start + kChunk);
    std::memset(sub, 0, sizeof sub);
    size_t i = start;
    for (; i + 4 <= end; i += 4) {
      ++sub[0][bin(i)];
      ++sub[1][bin(i + 1)];
      ++sub[2][bin(i + 2)];
      ++sub[3][bin(i + 3)];
    }
    for (; i < end; ++i) ++sub[0][bin(i)];
    for (size_t b = 0; b < bins; ++b) h[b] += sub[0][b] + sub[1][b] + sub[2][b] + sub[3][b];
  }
}

// Histogram of pass-1 buckets over all of x.
void Histogram1Plain(const float* x, size_t n, size_t* h) {
  std::fill(h, h + kBuckets1, size_t{0});
  CountInFours(
      n, kBuckets1, ThreadScratch<4, kBuckets1>(),
      [&](size_t i) { return (KeyAt(x, i) + kBias1) >> kShift1; }, h);
}

}  // namespace

Pass1 LocateBucket(const float* x, size_t n, size_t k) {
  if (n == 0 || k == 0) return Pass1{};
  size_t h[kBuckets1];
  Histogram1Plain(x, n, h);
  return LocateInHistogram(h, k);
}

// Passes 2 and 3 over the m candidate keys of one pass-1 bucket (all in
// [lo, lo + 2^20)): finds the key of the need-th largest (1 <= need <= m).
// Reorders/overwrites keys. Returns the threshold key; *take is how many
// entries with that key are kept, *above how many candidates are larger.
uint32_t SelectAmongCandidates(uint32_t* keys, size_t m, uint32_t lo, size_t need, size_t* take,
                               size_t* above) {
  *above = 0;
  uint32_t prefix = 0;  // high bits (relative to lo) fixed so far
  // Pass 2 looks at bits 19..9, pass 3 at bits 8..0 of key - lo.
  const int shifts[2] = {9, 0};
  const uint32_t masks[2] = {0x7ffu, 0x1ffu};
  for (int pass = 0; pass < 2; ++pass) {
    const int sh = shifts[pass];
    const uint32_t mask = masks[pass];
    size_t h[2048] = {};
    for (size_t i = 0; i < m; ++i) ++h[((keys[i] - lo) >> sh) & mask];
    size_t cum = 0;
    uint32_t d = mask;
    for (;; --d) {
      if (cum + h[d] >= need) break;
      cum += h[d];
    }
    *above += cum;
    need -= cum;
    prefix |= d << sh;
    if (pass == 0) {
      // Keep only this digit's candidates for pass 3 (in place, stable).
      size_t w = 0;
      for (size_t i = 0; i < m; ++i) {
        keys[w] = keys[i];
        w += ((keys[i] - lo) >> sh) == d;
      }
      m = w;
    }
  }
  *take = need;
  return lo + prefix;
}

namespace {

// Passes 2 and 3 straight over x, for buckets too large to gather (many
// ties, all-equal data): no memory beyond the histograms. Keys outside
// [lo, lo + width) land in a spill bin that is ignored.
template <size_t kBins>
void HistogramRange(const float* x, size_t n, uint32_t lo, int shift, size_t* h) {
  constexpr uint32_t kSpill = kBins;
  const uint32_t width = static_cast<uint32_t>(kBins) << shift;
  std::fill(h, h + kBins, size_t{0});
  auto bin = [&](size_t i) {
    const uint32_t rel = KeyAt(x, i) - lo;  // wraps for keys below lo
    return rel < width ? rel >> shift : kSpill;
  };
  CountInFours(n, kBins, ThreadScratch<4, kBins + 1>(), bin, h);
}

// The digit (scanning from the top) where the running count reaches *need;
// *need becomes the count still to take within it, *above grows by the rest.
uint32_t PickDigit(const size_t* h, uint32_t top, size_t* need, size_t* above) {
  size_t cum = 0;
  uint32_t d = top;
  for (;; --d) {
    if (cum + h[d] >= *need) break;
    cum += h[d];
  }
  *above += cum;
  *need -= cum;
  return d;
}

uint32_t SelectInRangeOfX(const float* x, size_t n, uint32_t lo, size_t need, size_t* take,
                          size_t* above) {
  *above = 0;
  std::vector<size_t> h(2048);
  HistogramRange<2048>(x, n, lo, 9, h.data());
  const uint32_t d = PickDigit(h.data(), 2047, &need, above);
  const uint32_t lo3 = lo + (d << 9);
  HistogramRange<512>(x, n, lo3, 0, h.data());
  const uint32_t e = PickDigit(h.data(), 511, &need, above);
  *take = need;
  return lo3 + e;
}

}  // namespace

// Completes a pass-1 result into a threshold, gathering the bucket's keys.
TopKThreshold Refine(const float* x, size_t n, const Pass1& p) {
  TopKThreshold t;
  if (p.bucket == 0) return t;
  const uint32_t lo = BucketLo(p.bucket);
  size_t take = 0, above = 0;
  if (!GatherCandidates(p.in_bucket, n)) {
    t.threshold_key = SelectInRangeOfX(x, n, lo, p.need, &take, &above);
    t.take_at_threshold = take;
    t.count_above = p.above + above;
    return t;
  }
  std::vector<uint32_t> keys(p.in_bucket + kCompactSlack);
  const size_t m =
      internal::GatherKeysInRange(x, n, lo, BucketHi(p.bucket), p.in_bucket, keys.data());
  assert(m == p.in_bucket);
  t.threshold_key = SelectAmongCandidates(keys.data(), m, lo, p.need, &take, &above);
  t.take_at_threshold = take;
  t.count_above = p.above + above;
  return t;
}

namespace {

// The accumulating pass-1 histogram, four entries at a time: each sum is
// stored and counted while in a register (measured 8-20% faster than
// accumulating 16-entry groups with AccumulateSpan first). The adds are
// written as four-lane SSE: x and grad may alias as far as the compiler
// knows, so it keeps the plain form scalar (measured 58 -> 50 ms at 25M on
// the reference VM); a lane's add or multiply rounds as the scalar one.
template <bool kVelocity>
void Histogram1AccImpl(float* x, size_t n, const Accumulate& a, size_t* h) {
  std::fill(h, h + kBuckets1, size_t{0});
  const float* g = a.grad;
  float* u = a.velocity;
  const float m = a.momentum;
  auto sum = [&](size_t i) {
    float add = g[i];
    if constexpr (kVelocity) {
      add = u[i] * m + add;
      u[i] = add;
    }
    const float v = x[i] + add;
    x[i] = v;
    uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return ((b & 0x7fffffffu) + kBias1) >> kShift1;
  };
#if defined(__SSE2__)
  uint32_t(&sub)[4][kBuckets1] = ThreadScratch<4, kBuckets1>();
  std::memset(sub, 0, sizeof sub);
  const __m128i abs = _mm_set1_epi32(0x7fffffff), bias = _mm_set1_epi32(kBias1);
  const __m128 mv = _mm_set1_ps(m);
  size_t i = 0;
  // Counts stay below 2^32 per lane: chunks of 2^30 entries, as CountInFours.
  for (size_t start = 0; start < n; start += size_t{1} << 30) {
    const size_t end = std::min(n, start + (size_t{1} << 30));
    for (i = start; i + 4 <= end; i += 4) {
      __m128 add = _mm_loadu_ps(g + i);
      if constexpr (kVelocity) {
        add = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(u + i), mv), add);
        _mm_storeu_ps(u + i, add);
      }
      const __m128 v = _mm_add_ps(_mm_loadu_ps(x + i), add);
      _mm_storeu_ps(x + i, v);
      const __m128i key =
          _mm_srli_epi32(_mm_add_epi32(_mm_and_si128(_mm_castps_si128(v), abs), bias), kShift1);
      alignas(16) uint32_t b[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(b), key);
      ++sub[0][b[0]];
      ++sub[1][b[1]];
      ++sub[2][b[2]];
      ++sub[3][b[3]];
    }
    for (size_t b = 0; b < kBuckets1; ++b) {
      h[b] += sub[0][b] + sub[1][b] + sub[2][b] + sub[3][b];
    }
    std::memset(sub, 0, sizeof sub);
  }
  for (; i < n; ++i) ++h[sum(i)];
#else
  CountInFours(n, kBuckets1, ThreadScratch<4, kBuckets1>(), sum, h);
#endif
}

void Histogram1Acc(float* x, size_t n, const Accumulate& a, size_t* h) {
  if (a.velocity != nullptr) {
    Histogram1AccImpl<true>(x, n, a, h);
  } else {
    Histogram1AccImpl<false>(x, n, a, h);
  }
}

}  // namespace

void Histogram1(float* x, size_t n, const Accumulate* a, size_t* h) {
  if (a == nullptr) {
    Histogram1Plain(x, n, h);
  } else {
    Histogram1Acc(x, n, *a, h);
  }
}

Pass1 LocateInHistogram(const size_t* h, size_t k) {
  Pass1 p;
  if (k == 0) return p;
  size_t cum = 0;
  for (size_t b = kTopReal; b >= 1; --b) {
    if (cum + h[b] >= k) {
      p.bucket = b;
      p.above = cum;
      p.need = k - cum;
      p.in_bucket = h[b];
      return p;
    }
    cum += h[b];
  }
  // k >= nonzeros: everything nonzero goes; the threshold is the lowest
  // nonempty bucket's smallest key.
  for (size_t b = 1; b <= kTopReal; ++b) {
    if (h[b] != 0) {
      p.bucket = b;
      p.above = cum - h[b];
      p.need = h[b];
      p.in_bucket = h[b];
      return p;
    }
  }
  return p;  // all zero or NaN
}

}  // namespace gradex::kernels::internal

namespace gradex::kernels {

TopKThreshold FindTopKThreshold(const float* x, size_t n, size_t k) {
  return internal::Refine(x, n, internal::LocateBucket(x, n, k));
}

}  // namespace gradex::kernels
