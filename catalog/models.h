// The models every layer shares and no transport owns: how a gradient is cut
// into blocks and how many entries a block keeps, and B-SAG's k' controller.
// The data plane (collectives/), the coordinator and the simulator all use
// these, so that their numbers cannot drift apart.
#ifndef GRADEX_CATALOG_MODELS_H_
#define GRADEX_CATALOG_MODELS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace gradex::catalog {

// Entries a block of `size` elements keeps: ceil(density * size), at most size.
// The small epsilon keeps 0.01 * 6250000 at 62500 despite binary rounding.
inline size_t KeepCount(double density, size_t size) {
  if (density <= 0) return 0;
  double k = std::ceil(density * static_cast<double>(size) - 1e-9);
  return k >= static_cast<double>(size) ? size : static_cast<size_t>(k);
}

// Smallest s with 2^s >= p; largest s with 2^s <= p (p >= 1).
inline int CeilLog2(int p) {
  int s = 0;
  while ((1 << s) < p) ++s;
  return s;
}
inline int FloorLog2(int p) {
  int s = 0;
  while ((2 << s) <= p) ++s;
  return s;
}
inline bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

// Block b of `parts` blocks of an n-element gradient covers
// [b*n/parts, (b+1)*n/parts); some may be empty.
inline uint64_t BlockBegin(uint64_t n, int parts, int b) {
  return n * static_cast<uint64_t>(b) / static_cast<uint64_t>(parts);
}
// Entries block `pos` of q blocks keeps at `density`.
inline uint64_t BlockKeep(uint64_t n, int q, int pos, double density) {
  return KeepCount(density, BlockBegin(n, q, pos + 1) - BlockBegin(n, q, pos));
}

// SparDL's B-SAG k' step controller (SparDL Algorithm 2, as the authors' code
// runs it): k' starts at ceil(k_block/T) with a step of (k_block - k')/100;
// after each call, with u the post-gather count, a step whose sign matches the
// wanted direction (shrink when u > k_block, grow otherwise) is right; two
// right moves in a row double the step, a wrong one reverses it and halves it
// (or only reverses it at +-1). k' stays within [ceil(k_block/T), k_block].
class KPrimeController {
 public:
  KPrimeController() = default;  // unset: Update does nothing
  KPrimeController(uint64_t k_block, int teams);
  uint64_t kprime() const { return static_cast<uint64_t>(kprime_); }
  int64_t step() const { return step_; }
  uint64_t k_block() const { return static_cast<uint64_t>(k_block_); }
  int teams() const { return teams_; }
  // u: the post-gather count of a call that ran with kprime().
  void Update(uint64_t u);

 private:
  int64_t k_block_ = 0;
  int teams_ = 0;
  int64_t floor_ = 0;
  int64_t kprime_ = 0;
  int64_t step_ = 0;
  int right_in_a_row_ = 0;
};

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_MODELS_H_
