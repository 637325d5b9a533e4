// Small collectives the in-band invariant checks (benchmark, agent) run over
// the same Transport as the algorithms (so they work across processes): a
// barrier and an all-gather of one word per rank. Tags live in the range
// collectives/tag_space.h reserves for them.
#ifndef GRADEX_COLLECTIVES_IN_BAND_H_
#define GRADEX_COLLECTIVES_IN_BAND_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/tag_space.h"
#include "transport/transport.h"

namespace gradex::collectives {

// The in-band checks' tags: their phase byte, then a sequence number.
inline constexpr uint64_t kInBandTagBase = uint64_t{kTagPhaseInBandChecks} << 40;

class InBand {
 public:
  explicit InBand(transport::Transport& t) : t_(t) {}

  // Every rank has entered once this returns on any rank (all-to-all of empty
  // messages; P is small).
  absl::Status Barrier(transport::Deadline deadline);

  // Every rank's `value`, indexed by rank.
  absl::StatusOr<std::vector<uint64_t>> AllGather(uint64_t value, transport::Deadline deadline);

 private:
  transport::Transport& t_;
  uint32_t seq_ = 0;  // advances identically on every rank; low 32 bits of the tag
};

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_IN_BAND_H_
