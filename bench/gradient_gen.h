// Synthetic gradients: seeded per (seed, rank, iteration), with ties and zeros.
#ifndef GRADEX_BENCH_GRADIENT_GEN_H_
#define GRADEX_BENCH_GRADIENT_GEN_H_

#include <cstdint>
#include <span>

namespace gradex::bench {

// Fills `out` deterministically from (seed, rank, iteration) alone, so every
// transport and every process count reproduces the same inputs. About 5% of
// the entries are exactly zero; the rest are quantised to a grid (2^-16 steps,
// or integers in [-64, 64] when `integer`), so many magnitudes tie, which
// exercises the tie rule of every top-k. Magnitudes are skewed towards zero,
// as real gradients are.
void GenerateGradient(uint64_t seed, int rank, uint64_t iteration, bool integer,
                      std::span<float> out);

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_GRADIENT_GEN_H_
