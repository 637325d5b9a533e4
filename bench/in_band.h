// Small collectives the benchmark runs over the same Transport as the
// algorithms (so they work across processes): a barrier and an all-gather of
// one word per rank. Tags live in a range of their own (see kBenchTagBase).
#ifndef GRADEX_BENCH_IN_BAND_H_
#define GRADEX_BENCH_IN_BAND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace gradex::bench {

// Phase byte 0xff of the collectives' tag layout (phase << 40 | step << 16 |
// sub), which no algorithm phase uses, so bench messages never match theirs.
inline constexpr uint64_t kBenchTagBase = uint64_t{0xff} << 40;

class InBand {
 public:
  explicit InBand(Transport& t) : t_(t) {}

  // Every rank has entered once this returns on any rank (all-to-all of empty
  // messages; P is small).
  absl::Status Barrier(Deadline deadline);

  // Every rank's `value`, indexed by rank.
  absl::StatusOr<std::vector<uint64_t>> AllGather(uint64_t value, Deadline deadline);

 private:
  Transport& t_;
  uint32_t seq_ = 0;  // advances identically on every rank; low 32 bits of the tag
};

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_IN_BAND_H_
