// The link probe behind the coordinator's automatic team count: at the start
// of an epoch (after the in-band entry agreement, before the first step) every
// rank times a few ring exchanges with its neighbours (send to r+1, receive
// from r-1) at a small and a large message size over the epoch's transport.
// α is the median small-message time, β the difference of the medians over
// the difference of the sizes. All ranks run it at the same point, so it
// cannot deadlock; every wait has the caller's deadline, and a lost peer or
// the deadline is an error the agent treats like a failed step.
#ifndef GRADEX_MEMBER_LINK_PROBE_H_
#define GRADEX_MEMBER_LINK_PROBE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/tag_space.h"
#include "member/control_plane.h"
#include "transport/transport.h"

namespace gradex::member {

// Phase byte of the probe's tags (collectives/tag_space.h).
inline constexpr uint16_t kProbePhase = collectives::kTagPhaseLinkProbe;

struct LinkProbeOptions {
  size_t small_bytes = 16;      // the header alone
  size_t big_bytes = 1u << 20;  // 1 MiB
  int repeats = 5;              // timed exchanges per size (after one untimed)
};

// FAILED_PRECONDITION for P=1 (no link to measure). Every received message is
// checked (size, magic, epoch, size index, repetition) before it counts.
absl::StatusOr<LinkEstimate> ProbeLinks(transport::Transport& transport, uint32_t epoch,
                                        transport::Deadline deadline,
                                        const LinkProbeOptions& options = {});

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_LINK_PROBE_H_
