// The dense route of DGS at R = 1 (ASGD; docs/architecture.md "DGS"):
// memory-bound loops over whole ranges that give exactly the bits of the
// sparse route, where only nonzeros are entries. Adding a value v as an
// entry when v != 0 and nothing otherwise is x + (v != 0 ? v : −0): x + (−0)
// is x for every x, −0 included, while x + (+0) would turn a −0 into +0.
#ifndef GRADEX_PS_DGS_DENSE_H_
#define GRADEX_PS_DGS_DENSE_H_

#include <cstddef>
#include <cstdint>

namespace gradex::ps {

// dst[i] += src[i] for every nonzero src[i] (bitwise as the sparse route);
// returns the count of nonzeros (the entries the sparse route would carry).
inline uint64_t DgsAddNonzeros(float* __restrict dst, const float* __restrict src, size_t n) {
  uint64_t nonzeros = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool nz = src[i] != 0.0f;
    dst[i] += nz ? src[i] : -0.0f;
    nonzeros += nz;
  }
  return nonzeros;
}

// Moves every nonzero of d into out (out[i] = d[i], then d[i] = +0 where it
// was nonzero; zeros stay as they were, as the sparse route leaves them);
// returns the count of nonzeros.
inline uint64_t DgsTakeNonzeros(float* __restrict d, float* __restrict out, size_t n) {
  uint64_t nonzeros = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = d[i];
    const bool nz = v != 0.0f;
    out[i] = v;
    d[i] = nz ? 0.0f : v;
    nonzeros += nz;
  }
  return nonzeros;
}

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_DENSE_H_
