// Operations on sorted COO runs and dense <-> sparse conversion.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>

#include "kernels/compact.h"
#include "kernels/sparse.h"

namespace gradex::kernels {
namespace {

using internal::kCompactSlack;
using internal::kInfKey;

// Appends every entry with key in [lo, hi]. The count is unknown, so x is
// taken in cache-sized chunks: count (vectorised), grow `out` exactly, then
// compact while the chunk is still in cache; x is read from memory once.
size_t AppendKeyRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint32_t index_base,
                      SparseVec* out) {
  constexpr size_t kChunk = 32 * 1024;
  const size_t start = out->idx.size();
  size_t size = start;
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t len = std::min(kChunk, n - off);
    const size_t cnt = internal::CountKeyRange(x + off, len, lo, hi);
    if (cnt == 0) continue;
    if (out->idx.size() < size + cnt + kCompactSlack) {
      // Geometric growth so that the resizes stay amortised O(1) per entry.
      const size_t want = std::max(size + cnt + kCompactSlack, 2 * out->idx.size());
      out->idx.resize(want);
      out->val.resize(want);
    }
    size += internal::CompactKeyRange(x + off, len, lo, hi, index_base + static_cast<uint32_t>(off),
                                      cnt, out->idx.data() + size, out->val.data() + size);
  }
  out->idx.resize(size);
  out->val.resize(size);
  return size - start;
}

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

inline void StoreBits(float* p, uint32_t b) { std::memcpy(p, &b, sizeof b); }

constexpr uint32_t kNegZero = 0x80000000u;

// kMarkCancelled: an equal-index sum that is +0 while an input was present
// (any bit pattern but +0) is written -0.0f, so a cancelled sum stays present.
template <bool kMarkCancelled>
void MergeInto(SparseView a, SparseView b, uint32_t* oi, float* ov, size_t* count) {
  size_t i = 0, j = 0, c = 0;
  // Branch-free body: the order of two runs of random indices is not
  // predictable, so select with conditional moves and advance by flags.
  while (i < a.nnz && j < b.nnz) {
    const uint32_t ia = a.idx[i], ib = b.idx[j];
    const float va = a.val[i], vb = b.val[j];
    const float sum = va + vb;
    // Selects by masks on the bit patterns: GCC turns float selects into
    // branches, which mispredict on every other entry of interleaved runs. Values
    // taken alone are copied, not added to 0, so -0.0f survives.
    const uint32_t lt = 0u - static_cast<uint32_t>(ia < ib);
    const uint32_t eq = 0u - static_cast<uint32_t>(ia == ib);
    const uint32_t lone = (lt & Bits(va)) | (~lt & Bits(vb));
    uint32_t both = Bits(sum);
    if constexpr (kMarkCancelled) {
      both |= (0u - static_cast<uint32_t>(both == 0 && (Bits(va) | Bits(vb)) != 0)) & kNegZero;
    }
    oi[c] = ia < ib ? ia : ib;
    StoreBits(ov + c, (eq & both) | (~eq & lone));
    ++c;
    i += ia <= ib;
    j += ib <= ia;
  }
  const size_t ra = a.nnz - i, rb = b.nnz - j;
  if (ra) {
    std::memcpy(oi + c, a.idx + i, ra * sizeof(uint32_t));
    std::memcpy(ov + c, a.val + i, ra * sizeof(float));
    c += ra;
  }
  if (rb) {
    std::memcpy(oi + c, b.idx + j, rb * sizeof(uint32_t));
    std::memcpy(ov + c, b.val + j, rb * sizeof(float));
    c += rb;
  }
  *count = c;
}

bool Overlaps(const void* p, size_t bytes, const void* q, size_t qbytes) {
  if (bytes == 0 || qbytes == 0) return false;
  const auto* a = static_cast<const char*>(p);
  const auto* b = static_cast<const char*>(q);
  return std::less<const char*>()(a, b + qbytes) && std::less<const char*>()(b, a + bytes);
}

template <bool kMarkCancelled>
void Merge(SparseView a, SparseView b, SparseVec* out) {
  const size_t cap = a.nnz + b.nnz;
  // out may be one of the inputs (acc = acc + b): merge into fresh storage then.
  const bool alias =
      Overlaps(out->idx.data(), out->idx.capacity() * sizeof(uint32_t), a.idx, a.nnz * 4) ||
      Overlaps(out->idx.data(), out->idx.capacity() * sizeof(uint32_t), b.idx, b.nnz * 4) ||
      Overlaps(out->val.data(), out->val.capacity() * sizeof(float), a.val, a.nnz * 4) ||
      Overlaps(out->val.data(), out->val.capacity() * sizeof(float), b.val, b.nnz * 4);
  size_t c = 0;
  if (alias) {
    SparseVec tmp;
    tmp.idx.resize(cap);
    tmp.val.resize(cap);
    MergeInto<kMarkCancelled>(a, b, tmp.idx.data(), tmp.val.data(), &c);
    tmp.idx.resize(c);
    tmp.val.resize(c);
    *out = std::move(tmp);
    return;
  }
  out->idx.resize(cap);
  out->val.resize(cap);
  MergeInto<kMarkCancelled>(a, b, out->idx.data(), out->val.data(), &c);
  out->idx.resize(c);
  out->val.resize(c);
}

}  // namespace

size_t CompactAbove(const float* x, size_t n, float threshold, uint32_t index_base,
                    SparseVec* out) {
  const uint32_t lo = CompactAboveKey(threshold);
  if (lo > kInfKey) return 0;  // a NaN threshold
  return AppendKeyRange(x, n, lo, kInfKey, index_base, out);
}

void MergeAdd(SparseView a, SparseView b, SparseVec* out) { Merge<false>(a, b, out); }

void MergeAddKeepCancelled(SparseView a, SparseView b, SparseVec* out) { Merge<true>(a, b, out); }

void ScatterAdd(SparseView s, uint32_t index_base, float scale, float* dense) {
  // Sparse targets in a large dense span miss the cache on almost every entry
  // and the hardware prefetcher cannot follow the irregular stride; prefetch
  // a few dozen entries ahead (indices are sorted, so this stays in order).
  constexpr size_t kAhead = 32;
  const size_t n = s.nnz;
  const size_t main = n > kAhead ? n - kAhead : 0;
  size_t i = 0;
  for (; i < main; ++i) {
    __builtin_prefetch(dense + (s.idx[i + kAhead] - index_base), 1);
    // Product rounded before the add (no fused multiply-add), as on the GPU.
    const float p = scale * s.val[i];
    dense[s.idx[i] - index_base] += p;
  }
  for (; i < n; ++i) {
    const float p = scale * s.val[i];
    dense[s.idx[i] - index_base] += p;
  }
}

void DenseToSparse(const float* x, size_t n, uint32_t index_base, SparseVec* out) {
  out->clear();
  // Keys 1..0x7fffffff: every nonzero, NaN included.
  AppendKeyRange(x, n, 1u, 0x7fffffffu, index_base, out);
}

void SparseToDense(SparseView s, uint32_t index_base, float* dense, size_t n) {
  std::fill(dense, dense + n, 0.0f);
  for (size_t i = 0; i < s.nnz; ++i) {
    assert(s.idx[i] - index_base < n);
    dense[s.idx[i] - index_base] = s.val[i];
  }
}

size_t FirstNonFinite(const float* x, size_t n) {
  uint32_t any = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, x + i, sizeof b);
    any |= static_cast<uint32_t>((b & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return n;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return i;
  }
  return n;
}

size_t ZeroNonFinite(float* x, size_t n, size_t* first) {
  const size_t at = FirstNonFinite(x, n);
  if (first != nullptr) *first = at;
  size_t count = 0;
  for (size_t i = at; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    x[i] = 0.0f;
    ++count;
  }
  return count;
}

void ZeroAt(const uint32_t* idx, size_t nnz, uint32_t index_base, float* x) {
  for (size_t i = 0; i < nnz; ++i) x[idx[i] - index_base] = 0.0f;
}

double SumOfSquares(const float* x, size_t n) {
  double sq = 0;
  for (size_t i = 0; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  return sq;
}

bool IsSortedUniqueInRange(const uint32_t* idx, size_t nnz, uint32_t lo, uint32_t hi) {
  if (nnz == 0) return true;
  if (idx[0] < lo || idx[nnz - 1] >= hi) return false;
  // Strictly increasing from idx[0] >= lo to idx[nnz-1] < hi puts every entry
  // in range. Checked in blocks without a branch per entry.
  constexpr size_t kBlock = 1024;
  for (size_t start = 1; start < nnz; start += kBlock) {
    const size_t end = std::min(nnz, start + kBlock);
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) bad |= idx[i] <= idx[i - 1];
    if (bad) return false;
  }
  return true;
}

}  // namespace gradex::kernels
