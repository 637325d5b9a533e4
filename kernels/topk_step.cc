// The step kernels of topk_step.h. The fused path is the radix select of
// topk_select.cc with the accumulation done inside its histogram pass. The
// reuse path gathers, in the accumulating pass, every entry with a key at or
// above a floor just below the last step's threshold; when that set holds the
// k-th entry (at least k of them: everything outside is smaller) the exact
// selection is the top-k of the set, whose order is x's, so ties still go to
// the lower index.
#include "kernels/topk_step.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#include "kernels/compact.h"
#include "kernels/topk_radix.h"

namespace gradex::kernels {
namespace {

using internal::kCompactSlack;
using internal::kInfKey;

// Grow-only candidate buffers (heap-backed: see topk_threshold.cc on TLS).
struct Candidates {
  std::vector<uint32_t> idx;
  std::vector<float> val;
  void Reserve(size_t m) {
    if (idx.size() < m) {
      idx.resize(m);
      val.resize(m);
    }
  }
};

Candidates& ThreadCandidates() {
  static thread_local Candidates c;
  return c;
}

uint32_t KeyOf(float v) { return MagnitudeKey(v); }

// The smallest key among the entries appended since `old` (the threshold of
// a selection, since every selected key is >= it); 0 when none.
uint32_t MinKeySince(const SparseVec& out, size_t old) {
  uint32_t m = 0;
  for (size_t i = old; i < out.val.size(); ++i) {
    const uint32_t key = KeyOf(out.val[i]);
    m = (m == 0 || key < m) ? key : m;
  }
  return m;
}

// Finishes a reuse try over m candidates (m >= k, all selectable, x's
// order): appends the top-k of them to out. Returns the threshold key.
uint32_t FinishAmongCandidates(const uint32_t* ci, const float* cv, size_t m, size_t k,
                               SparseVec* out) {
  const TopKThreshold t = FindTopKThreshold(cv, m, k);
  assert(t.selected() == k);
  const size_t old = out->idx.size();
  out->idx.resize(old + k);
  out->val.resize(old + k);
  uint32_t* oi = out->idx.data() + old;
  float* ov = out->val.data() + old;
  size_t take = t.take_at_threshold, w = 0;
  for (size_t i = 0; i < m && w < k; ++i) {
    const uint32_t key = KeyOf(cv[i]);
    const bool tie = key == t.threshold_key && take > 0;
    if (key > t.threshold_key || tie) {
      oi[w] = ci[i];
      ov[w] = cv[i];
      ++w;
      take -= tie ? 1 : 0;
    }
  }
  assert(w == k);
  return t.threshold_key;
}

}  // namespace

void AccumulateInto(float* x, size_t n, const Accumulate& a) {
  internal::AccumulateSpan(x, 0, n, a);
}

uint32_t PredictKey(const ThresholdReuse& r) {
  const int64_t a = r.drift[0], b = r.drift[1];
  int64_t move = 0;
  if (a > 0 && b > 0) move = std::min(a, b);
  if (a < 0 && b < 0) move = std::max(a, b);
  const int64_t p = static_cast<int64_t>(r.last_key) + move;
  return static_cast<uint32_t>(std::clamp<int64_t>(p, 1, kInfKey));
}

void UpdateReuse(ThresholdReuse* r, uint32_t threshold_key, bool tried, size_t candidates,
                 size_t k) {
  const bool both = r->last_key != 0 && threshold_key != 0;
  r->drift[1] = r->drift[0];
  r->drift[0] = both ? static_cast<int32_t>(threshold_key - r->last_key) : 0;
  r->last_key = threshold_key;
  if (!tried) return;
  r->last_candidates = candidates;
  // Aim for between 1.25k and 3k candidates: enough that the next step's
  // drift keeps the k-th inside, few enough that finishing stays O(k).
  const bool widen = candidates < k + k / 4;  // a near miss or a miss
  const bool narrow = candidates > 3 * k;
  if (widen) r->margin = std::min(kMaxReuseMargin, r->margin * 2);
  if (narrow) r->margin = std::max(kMinReuseMargin, r->margin / 2);
}

void NoteSelection(ThresholdReuse* r, const SparseVec& out, size_t from, size_t n, size_t k) {
  if (r == nullptr || n == 0 || k == 0) return;
  ++r->steps;
  UpdateReuse(r, MinKeySince(out, from), false, 0, k);
}

size_t SelectTopKStep(float* x, size_t n, size_t k, uint32_t index_base, const Accumulate* acc,
                      ThresholdReuse* reuse, bool zero_selected, SparseVec* out,
                      size_t* nonfinite) {
  if (n == 0) return 0;
  size_t* count_bad = acc != nullptr ? nonfinite : nullptr;
  if (k == 0) {
    if (acc != nullptr) AccumulateInto(x, n, *acc);
    if (count_bad != nullptr) *count_bad += internal::CountKeyRange(x, n, kInfKey, 0x7fffffffu);
    return 0;
  }
  const size_t old = out->idx.size();
  bool tried = false;
  size_t gathered = 0;
  if (reuse != nullptr) {
    ++reuse->steps;
    if (reuse->last_key != 0 && k < n) {
      tried = true;
      const size_t cap = ReuseCandidateCap(k, n);
      Candidates& c = ThreadCandidates();
      c.Reserve(cap + kCompactSlack);
      gathered =
          internal::AccumulateCompactKeyRange(x, n, acc, ReuseFloor(*reuse), kInfKey, index_base,
                                              cap, c.idx.data(), c.val.data(), count_bad);
      acc = nullptr;  // x holds the sum now, and its non-finite entries are counted
      count_bad = nullptr;
      if (gathered >= k && gathered <= cap) {
        const uint32_t thr = FinishAmongCandidates(c.idx.data(), c.val.data(), gathered, k, out);
        ++reuse->hits;
        UpdateReuse(reuse, thr, true, gathered, k);
        if (zero_selected) {
          for (size_t i = old; i < old + k; ++i) x[out->idx[i] - index_base] = 0.0f;
        }
        return k;
      }
      ++(gathered < k ? reuse->misses_few : reuse->misses_many);
    }
  }
  size_t h[internal::kBuckets1];
  internal::Histogram1(x, n, acc, h);
  if (count_bad != nullptr) {
    // NaN keys fill the buckets above +Inf's; +Inf shares the top finite
    // bucket with magnitudes above 3.19e38. Empty there (the usual case):
    // nothing to count; otherwise an exact count, before the zeroing.
    size_t maybe = 0;
    for (size_t b = internal::kInfBucket1; b < internal::kBuckets1; ++b) maybe += h[b];
    if (maybe > 0) *count_bad += internal::CountKeyRange(x, n, kInfKey, 0x7fffffffu);
  }
  const size_t got = internal::SelectFromPass1(x, n, internal::LocateInHistogram(h, k), index_base,
                                               out, zero_selected);
  if (reuse != nullptr) UpdateReuse(reuse, MinKeySince(*out, old), tried, gathered, k);
  return got;
}

size_t CompactAboveStep(float* x, size_t n, const Accumulate* acc, float threshold,
                        uint32_t index_base, size_t cap, SparseVec* out, size_t* nonfinite) {
  size_t* count_bad = acc != nullptr ? nonfinite : nullptr;
  if (n == 0) return 0;
  // A NaN threshold's key is above kInfKey: the range is empty, and the pass
  // still accumulates and counts.
  const uint32_t lo = CompactAboveKey(threshold);
  const size_t old = out->idx.size();
  out->idx.resize(old + cap + kCompactSlack);
  out->val.resize(old + cap + kCompactSlack);
  const size_t count =
      internal::AccumulateCompactKeyRange(x, n, acc, lo, kInfKey, index_base, cap,
                                          out->idx.data() + old, out->val.data() + old, count_bad);
  const size_t kept = count <= cap ? count : 0;
  out->idx.resize(old + kept);
  out->val.resize(old + kept);
  return count;
}

void BlockTopKStep(float* x, const std::vector<size_t>& bounds, const std::vector<size_t>& k,
                   uint32_t index_base, const Accumulate* acc, std::vector<ThresholdReuse>* reuse,
                   bool zero_selected, std::vector<SparseVec>* out, size_t* nonfinite) {
  const size_t blocks = bounds.empty() ? 0 : std::min(k.size(), bounds.size() - 1);
  assert(bounds.size() == k.size() + 1);
  out->resize(blocks);
  if (reuse != nullptr) reuse->resize(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    SparseVec& o = (*out)[b];
    o.clear();
    if (bounds[b + 1] <= bounds[b]) continue;
    const size_t off = bounds[b];
    Accumulate a;
    if (acc != nullptr) {
      a.grad = acc->grad + off;
      a.velocity = acc->velocity != nullptr ? acc->velocity + off : nullptr;
      a.momentum = acc->momentum;
    }
    SelectTopKStep(x + off, bounds[b + 1] - off, k[b], index_base + static_cast<uint32_t>(off),
                   acc != nullptr ? &a : nullptr, reuse != nullptr ? &(*reuse)[b] : nullptr,
                   zero_selected, &o, nonfinite);
  }
}

}  // namespace gradex::kernels
