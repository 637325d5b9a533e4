// The CPU top-k selection: the compaction of what a threshold selects
// (SelectFromPass1, CompactSelected), SelectTopK, BlockTopK and SparseTopK.
// The threshold's radix passes are in topk_threshold.cc.
#include <algorithm>
#include <cassert>
#include <vector>

#include "kernels/compact.h"
#include "kernels/sparse.h"
#include "kernels/topk_radix.h"

namespace gradex::kernels::internal {

// SelectTopK without a separate threshold pass: compacts every entry of the
// k-th entry's bucket and above (a superset, count known from pass 1), then
// refines among the bucket's entries and filters the superset in place. Two
// passes over x in all; the result equals FindTopKThreshold + CompactSelected.
size_t SelectFromPass1(float* x, size_t n, const Pass1& p, uint32_t index_base, SparseVec* out,
                       bool zero) {
  if (p.bucket == 0) return 0;
  const size_t super = p.above + p.in_bucket;
  if (!GatherCandidates(p.in_bucket, n)) {
    // A bucket this large (many equal magnitudes) would make the superset
    // cost more memory than two more passes over x.
    const size_t old = out->idx.size();
    const size_t c = CompactSelected(x, n, Refine(x, n, p), index_base, out);
    if (zero) {
      for (size_t i = old; i < old + c; ++i) x[out->idx[i] - index_base] = 0.0f;
    }
    return c;
  }
  const uint32_t lo = BucketLo(p.bucket), hi = BucketHi(p.bucket);
  const size_t old = out->idx.size();
  out->idx.resize(old + super + kCompactSlack);
  out->val.resize(old + super + kCompactSlack);
  uint32_t* oi = out->idx.data() + old;
  float* ov = out->val.data() + old;
  const size_t c = internal::CompactKeyRange(x, n, lo, kInfKey, index_base, super, oi, ov);
  assert(c == super);
  size_t kept = c;
  if (p.need < p.in_bucket) {
    std::vector<uint32_t> keys(p.in_bucket + kCompactSlack);
    size_t m = 0;
    for (size_t i = 0; i < c; ++i) {
      const uint32_t key = KeyAt(ov, i);
      keys[m] = key;
      m += key <= hi;
    }
    size_t take = 0, above = 0;
    const uint32_t thr = SelectAmongCandidates(keys.data(), m, lo, p.need, &take, &above);
    size_t w = 0;
    for (size_t i = 0; i < c; ++i) {
      const uint32_t key = KeyAt(ov, i);
      const uint32_t tie = key == thr;
      const uint32_t room = take > 0;
      const uint32_t keep = (key > thr) | (tie & room);
      take -= tie & room;
      oi[w] = oi[i];
      ov[w] = ov[i];
      w += keep;
    }
    kept = w;
  }
  out->idx.resize(old + kept);
  out->val.resize(old + kept);
  if (zero) {
    for (size_t i = 0; i < kept; ++i) x[oi[i] - index_base] = 0.0f;
  }
  return kept;
}

}  // namespace gradex::kernels::internal

namespace gradex::kernels {
namespace {

using internal::kCompactSlack;
using internal::KeyAt;
using internal::kInfKey;

size_t SelectFused(float* x, size_t n, size_t k, uint32_t index_base, SparseVec* out, bool zero) {
  return internal::SelectFromPass1(x, n, internal::LocateBucket(x, n, k), index_base, out, zero);
}

}  // namespace

size_t CompactSelected(const float* x, size_t n, const TopKThreshold& t, uint32_t index_base,
                       SparseVec* out) {
  if (t.threshold_key == 0 || t.selected() == 0) return 0;
  const size_t old = out->idx.size();
  const size_t want = t.selected();
  out->idx.resize(old + want + kCompactSlack);
  out->val.resize(old + want + kCompactSlack);
  uint32_t* oi = out->idx.data() + old;
  float* ov = out->val.data() + old;
  size_t c;
  if (t.take_at_threshold == 0) {
    c = t.threshold_key >= kInfKey ? 0
                                   : internal::CompactKeyRange(x, n, t.threshold_key + 1, kInfKey,
                                                               index_base, want, oi, ov);
  } else {
    c = internal::CompactKeyRangeTies(x, n, t.threshold_key, kInfKey, t.take_at_threshold,
                                      index_base, want, oi, ov);
  }
  out->idx.resize(old + c);
  out->val.resize(old + c);
  return c;
}

size_t SelectTopK(const float* x, size_t n, size_t k, uint32_t index_base, SparseVec* out) {
  // SelectFused only writes x when zeroing.
  return SelectFused(const_cast<float*>(x), n, k, index_base, out, /*zero=*/false);
}

size_t SelectTopKAndZero(float* x, size_t n, size_t k, uint32_t index_base, SparseVec* out) {
  return SelectFused(x, n, k, index_base, out, /*zero=*/true);
}

void BlockTopK(float* x, const std::vector<size_t>& bounds, const std::vector<size_t>& k,
               uint32_t index_base, bool zero_selected, std::vector<SparseVec>* out) {
  const size_t blocks = bounds.empty() ? 0 : std::min(k.size(), bounds.size() - 1);
  assert(bounds.size() == k.size() + 1);
  out->resize(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    SparseVec& o = (*out)[b];
    o.clear();
    if (bounds[b + 1] <= bounds[b]) continue;
    const size_t len = bounds[b + 1] - bounds[b];
    const uint32_t base = index_base + static_cast<uint32_t>(bounds[b]);
    SelectFused(x + bounds[b], len, k[b], base, &o, zero_selected);
  }
}

void SparseTopK(SparseView in, size_t k, SparseVec* kept, SparseVec* dropped) {
  kept->clear();
  if (dropped != nullptr) dropped->clear();
  const TopKThreshold t = FindTopKThreshold(in.val, in.nnz, k);
  const size_t nk = t.selected();
  kept->idx.resize(nk);
  kept->val.resize(nk);
  if (dropped != nullptr) {
    dropped->idx.resize(in.nnz - nk);
    dropped->val.resize(in.nnz - nk);
  }
  size_t ties = t.take_at_threshold, a = 0, d = 0;
  for (size_t i = 0; i < in.nnz; ++i) {
    const uint32_t key = KeyAt(in.val, i);
    bool keep = false;
    if (t.threshold_key != 0 && key <= kInfKey) {
      if (key > t.threshold_key) {
        keep = true;
      } else if (key == t.threshold_key && ties > 0) {
        --ties;
        keep = true;
      }
    }
    if (keep) {
      kept->idx[a] = in.idx[i];
      kept->val[a++] = in.val[i];
    } else if (dropped != nullptr) {
      dropped->idx[d] = in.idx[i];
      dropped->val[d++] = in.val[i];
    }
  }
}

}  // namespace gradex::kernels
