// Sparse gradient types and the CPU kernels on them. COO everywhere: uint32
// indices sorted ascending and unique, float32 values.
#ifndef GRADEX_KERNELS_SPARSE_H_
#define GRADEX_KERNELS_SPARSE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gradex::kernels {

struct SparseVec {
  std::vector<uint32_t> idx;
  std::vector<float> val;
  size_t nnz() const { return idx.size(); }
  void clear() {
    idx.clear();
    val.clear();
  }
};

struct SparseView {
  const uint32_t* idx = nullptr;
  const float* val = nullptr;
  size_t nnz = 0;
};

inline SparseView View(const SparseVec& v) { return {v.idx.data(), v.val.data(), v.idx.size()}; }

// Magnitude key of a float: its bits without the sign. For non-NaN floats the
// unsigned order of keys is the order of |x|.
inline uint32_t MagnitudeKey(float x) {
  uint32_t b;
  __builtin_memcpy(&b, &x, sizeof b);
  return b & 0x7fffffffu;
}

// The smallest magnitude key CompactAbove(x, n, threshold) keeps, for the
// CPU and CUDA compactions alike: |x| >= threshold is key(x) >= key(threshold)
// for every non-NaN x; a threshold <= 0 keeps every nonzero (key >= 1); a
// NaN threshold keeps nothing (the first NaN key, above +Inf's, which no kept
// key reaches: NaN entries are never kept).
inline uint32_t CompactAboveKey(float threshold) {
  if (threshold != threshold) return 0x7f800001u;
  return threshold > 0.0f ? MagnitudeKey(threshold) : 1u;
}

// The selection rule every top-k in gradex follows, so that CPU and CUDA and
// every rank agree bit for bit: keep the min(k, nonzeros) entries of largest
// magnitude; zeros are never selected; among equal magnitudes the lower index
// wins. Returned as the magnitude key `threshold_key` of the k-th kept entry
// plus `take_at_threshold`, how many entries with exactly that key are kept
// (lowest indices first); everything with a larger key is kept.
// NaN is never selected (it stays behind, e.g. in the residual, where the
// caller can see it); +-Inf is selected as the largest magnitude.
struct TopKThreshold {
  uint32_t threshold_key = 0;    // 0 when nothing is selected
  size_t take_at_threshold = 0;  // entries with key == threshold_key to keep
  size_t count_above = 0;        // entries with key > threshold_key
  size_t selected() const { return count_above + take_at_threshold; }
};

// O(n) radix select over magnitude keys. k may exceed n.
TopKThreshold FindTopKThreshold(const float* x, size_t n, size_t k);

// Compacts the entries selected by `t` (see TopKThreshold) into sorted COO,
// indices offset by `index_base`. Appends to `out`; returns the count appended.
size_t CompactSelected(const float* x, size_t n, const TopKThreshold& t, uint32_t index_base,
                       SparseVec* out);

// Top-k of a dense span: FindTopKThreshold + CompactSelected.
size_t SelectTopK(const float* x, size_t n, size_t k, uint32_t index_base, SparseVec* out);

// Same, and zeroes the selected entries in `x` so that x becomes what was left
// behind (the residual of a dense selection).
size_t SelectTopKAndZero(float* x, size_t n, size_t k, uint32_t index_base, SparseVec* out);

// Compaction of every entry with |x| >= threshold and x != 0 (threshold > 0;
// threshold <= 0 keeps every nonzero, a NaN threshold nothing; NaN entries
// are never kept).
size_t CompactAbove(const float* x, size_t n, float threshold, uint32_t index_base, SparseVec* out);

// Per-block top-k of a dense span split into blocks [bounds[b], bounds[b+1]),
// keeping k[b] in block b; out[b] receives block b's selection with global
// indices (bounds are offsets into x, indices are index_base + offset).
// When zero_selected is set, selected entries are zeroed in x.
void BlockTopK(float* x, const std::vector<size_t>& bounds, const std::vector<size_t>& k,
               uint32_t index_base, bool zero_selected, std::vector<SparseVec>* out);

// Top-k of a sparse vector under the same rule (ties: lower index wins).
// `kept` gets the selected entries, `dropped` the rest (both sorted). Either
// output may alias nothing else; `dropped` may be null.
void SparseTopK(SparseView in, size_t k, SparseVec* kept, SparseVec* dropped);

// out = a + b over the union of indices (sorted merge). Sums that are exactly
// zero are kept as explicit entries (conservation stays exact).
void MergeAdd(SparseView a, SparseView b, SparseVec* out);

// MergeAdd where a sum that cancels (+0 from inputs not both +0) is written
// -0.0f: on the wire +0 is absent and -0 is a present entry (IsPresent), so a
// cancelled sum travels and is delivered as 0 instead of looking cut.
void MergeAddKeepCancelled(SparseView a, SparseView b, SparseVec* out);

// Whether an entry goes on the wire: every bit pattern but +0.0f. A -0.0f is
// a sum that cancelled (MergeAddKeepCancelled); adding it changes no value.
inline bool IsPresent(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b != 0;
}

// dense[idx[i] - index_base] += scale * val[i].
void ScatterAdd(SparseView s, uint32_t index_base, float scale, float* dense);

// Nonzeros of a dense span as COO (indices offset by index_base); NaN counts
// as nonzero, -0.0f as zero. Replaces the contents of out.
void DenseToSparse(const float* x, size_t n, uint32_t index_base, SparseVec* out);

// Writes s into dense (which is zeroed first), n = dense length.
void SparseToDense(SparseView s, uint32_t index_base, float* dense, size_t n);

// Validation used on received data: indices strictly increasing and within
// [lo, hi). Returns false on the first violation.
bool IsSortedUniqueInRange(const uint32_t* idx, size_t nnz, uint32_t lo, uint32_t hi);

// The index of the first NaN or infinite value of x[0, n), or n when all are
// finite: a branch-free pass over the exponent bits first (it vectorises),
// the search only when one is there.
size_t FirstNonFinite(const float* x, size_t n);

// Sets x's NaN and infinite entries to 0 and returns their count; *first
// (may be null) gets the first one's index, n when there is none.
size_t ZeroNonFinite(float* x, size_t n, size_t* first);

// x[idx[i] - index_base] = 0 for every i < nnz (DGC's factor masking of the
// entries a result applied).
void ZeroAt(const uint32_t* idx, size_t nnz, uint32_t index_base, float* x);

// The sum of x's squares, accumulated in double in index order.
double SumOfSquares(const float* x, size_t n);

}  // namespace gradex::kernels

#endif  // GRADEX_KERNELS_SPARSE_H_
