// FNV-1a 64, written once: the job id stamped on frames, the saved state's
// and the DGS snapshot's checksums, the DGS layout fingerprint and the result
// hashes of the invariant checks and the simulator.
// In catalog/ (header only) as the lowest folder all its users (collectives/, services/) reach.
#ifndef GRADEX_CATALOG_FNV1A_H_
#define GRADEX_CATALOG_FNV1A_H_

#include <cstdint>
#include <span>
#include <string_view>

namespace gradex::catalog {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// The basis of the job id (JobId, PsJobId) and the saved state's checksum:
// the standard basis's decimal form (14695981039346656037) with its last
// digit lost. Kept because frames, other agents and saved files already carry
// hashes made from it.
inline constexpr uint64_t kFnv1aTruncatedBasis = 1469598103934665603ull;

// One FNV-1a step: `word` is xored in whole, then the state is multiplied.
// Hashes of words rather than bytes (float bits, other hashes) call it per word.
constexpr uint64_t Fnv1aMix(uint64_t h, uint64_t word) { return (h ^ word) * kFnv1aPrime; }

// FNV-1a over `bytes` in order, continuing from `h` (the basis for a fresh hash).
constexpr uint64_t Fnv1a(std::span<const uint8_t> bytes, uint64_t h = kFnv1aOffsetBasis) {
  for (uint8_t b : bytes) h = Fnv1aMix(h, b);
  return h;
}
constexpr uint64_t Fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffsetBasis) {
  for (unsigned char c : bytes) h = Fnv1aMix(h, c);
  return h;
}

}  // namespace gradex::catalog

#endif  // GRADEX_CATALOG_FNV1A_H_
