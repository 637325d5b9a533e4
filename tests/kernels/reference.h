// Naive reference implementations (std::sort and friends) and input
// generators for the kernel tests.
#ifndef GRADEX_TESTS_KERNELS_REFERENCE_H_
#define GRADEX_TESTS_KERNELS_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/sparse.h"

namespace gradex::kernels::testing {

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Selectable: nonzero and not NaN.
inline bool Selectable(float v) { return v != 0.0f && !std::isnan(v); }

// Top-k by sorting: largest |x| first, lower index first among equals.
inline SparseVec RefTopK(const float* x, size_t n, size_t k, uint32_t base) {
  std::vector<uint32_t> order;
  for (size_t i = 0; i < n; ++i) {
    if (Selectable(x[i])) order.push_back(static_cast<uint32_t>(i));
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const float ma = std::fabs(x[a]), mb = std::fabs(x[b]);
    if (ma != mb) return ma > mb;
    return a < b;
  });
  order.resize(std::min(k, order.size()));
  std::sort(order.begin(), order.end());
  SparseVec out;
  for (uint32_t i : order) {
    out.idx.push_back(base + i);
    out.val.push_back(x[i]);
  }
  return out;
}

inline TopKThreshold RefThreshold(const float* x, size_t n, size_t k) {
  TopKThreshold t;
  SparseVec s = RefTopK(x, n, k, 0);
  if (s.nnz() == 0) return t;
  uint32_t thr = 0xffffffffu;
  for (float v : s.val) thr = std::min(thr, MagnitudeKey(v));
  t.threshold_key = thr;
  for (float v : s.val) {
    if (MagnitudeKey(v) == thr) ++t.take_at_threshold;
  }
  for (size_t i = 0; i < n; ++i) {
    if (Selectable(x[i]) && MagnitudeKey(x[i]) > thr) ++t.count_above;
  }
  return t;
}

inline SparseVec RefMergeAdd(SparseView a, SparseView b) {
  std::map<uint32_t, std::vector<float>> m;
  for (size_t i = 0; i < a.nnz; ++i) m[a.idx[i]].push_back(a.val[i]);
  for (size_t i = 0; i < b.nnz; ++i) m[b.idx[i]].push_back(b.val[i]);
  SparseVec out;
  for (auto& [i, v] : m) {
    out.idx.push_back(i);
    out.val.push_back(v.size() == 1 ? v[0] : v[0] + v[1]);
  }
  return out;
}

// Bitwise equality of values (so that -0.0f, NaN payloads and denormals count).
inline bool SameBits(const SparseVec& a, const SparseVec& b) {
  if (a.idx != b.idx || a.val.size() != b.val.size()) return false;
  for (size_t i = 0; i < a.val.size(); ++i) {
    if (Bits(a.val[i]) != Bits(b.val[i])) return false;
  }
  return true;
}

enum class Dist { kGauss, kTies, kZeros, kAllEqual, kDenormal, kMixedSpecial, kUniform };

inline const char* Name(Dist d) {
  switch (d) {
    case Dist::kGauss:
      return "gauss";
    case Dist::kTies:
      return "ties";
    case Dist::kZeros:
      return "zeros";
    case Dist::kAllEqual:
      return "all-equal";
    case Dist::kDenormal:
      return "denormal";
    case Dist::kMixedSpecial:
      return "mixed-special";
    case Dist::kUniform:
      return "uniform";
  }
  return "?";
}

inline std::vector<Dist> AllDists() {
  return {Dist::kGauss,    Dist::kTies,         Dist::kZeros,  Dist::kAllEqual,
          Dist::kDenormal, Dist::kMixedSpecial, Dist::kUniform};
}

// Inputs for the sweeps; negative values throughout.
inline std::vector<float> Make(Dist d, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    switch (d) {
      case Dist::kGauss:
        x[i] = g(rng);
        break;
      case Dist::kTies:
        x[i] = static_cast<float>(small(rng));
        break;  // many ties, some zeros
      case Dist::kZeros:
        x[i] = rng() % 5 == 0 ? g(rng) : (rng() % 2 ? 0.0f : -0.0f);
        break;
      case Dist::kAllEqual:
        x[i] = i % 2 ? -0.5f : 0.5f;
        break;
      case Dist::kDenormal: {
        // Tiny magnitudes that all fall in the lowest radix buckets.
        const float den = std::numeric_limits<float>::denorm_min();
        x[i] = static_cast<float>(small(rng)) * den * static_cast<float>(rng() % 4);
        break;
      }
      case Dist::kMixedSpecial: {
        const uint32_t r = rng() % 16;
        if (r == 0)
          x[i] = std::numeric_limits<float>::infinity();
        else if (r == 1)
          x[i] = -std::numeric_limits<float>::infinity();
        else if (r == 2)
          x[i] = std::numeric_limits<float>::quiet_NaN();
        else if (r == 3)
          x[i] = -std::numeric_limits<float>::max();
        else if (r == 4)
          x[i] = std::numeric_limits<float>::denorm_min();
        else if (r == 5)
          x[i] = 0.0f;
        else
          x[i] = g(rng) * 1e30f;
        break;
      }
      case Dist::kUniform:
        x[i] = u(rng);
        break;
    }
  }
  return x;
}

}  // namespace gradex::kernels::testing

#endif  // GRADEX_TESTS_KERNELS_REFERENCE_H_
