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

// High in the user tag space (below kMaxTag) so it does not meet the tags the
// algorithms derive from small step and phase numbers.
inline constexpr uint64_t kBenchTagBase = uint64_t{0xBE7C} << 32;

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
  uint32_t seq_ = 0;  // advances identically on every rank
};

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_IN_BAND_H_
