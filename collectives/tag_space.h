// The one owner of the 48-bit tag space every user of a Transport shares:
// phase (8 bits) << 40 | sequence (low 24 bits) << 16 | sub (16 bits). The
// phase byte says whose message it is; the ranges below never overlap, so a
// message of one user can never match a receive of another.
#ifndef GRADEX_COLLECTIVES_TAG_SPACE_H_
#define GRADEX_COLLECTIVES_TAG_SPACE_H_

#include <cstdint>

namespace gradex::collectives {

// Phases of the algorithms' schedules (each algorithm numbers its own from 1).
inline constexpr uint16_t kTagPhaseCollectiveFirst = 0x01;
inline constexpr uint16_t kTagPhaseCollectiveLast = 0xEF;
// The hierarchical exchange's stages inside a node (collectives/algorithms/hierarchical.h):
// its own phases of the inner algorithm's call, which never meet the inner
// algorithm's (those run between ranks of different nodes).
inline constexpr uint16_t kTagPhaseNodeReduceScatter = 0xE0;
inline constexpr uint16_t kTagPhaseNodeAllGather = 0xE1;
// The agents' in-band epoch agreement (member/epoch_sync.h).
inline constexpr uint16_t kTagPhaseEpochAgreement = 0xF0;
// The agents' link probe at each epoch's start (member/link_probe.h).
inline constexpr uint16_t kTagPhaseLinkProbe = 0xF1;
// DGS worker <-> server shard messages (ps/dgs_exchange.h); the
// sequence is the shard id.
inline constexpr uint16_t kTagPhaseDgs = 0xF2;
// The in-band invariant checks' barrier and all-gather (collectives/in_band.h).
inline constexpr uint16_t kTagPhaseInBandChecks = 0xFF;

static_assert(kTagPhaseCollectiveLast < kTagPhaseEpochAgreement);
static_assert(kTagPhaseEpochAgreement < kTagPhaseLinkProbe);
static_assert(kTagPhaseLinkProbe < kTagPhaseDgs);
static_assert(kTagPhaseDgs < kTagPhaseInBandChecks);

// Tag of a message: phase (8 bits), sequence (low 24 bits; a collective's
// call id, the agreement's sequence), sub-step (16 bits).
inline constexpr uint64_t MessageTag(uint16_t phase, uint64_t sequence, uint32_t sub) {
  return (uint64_t{phase & 0xffu} << 40) | ((sequence & 0xffffffu) << 16) | (sub & 0xffffu);
}

}  // namespace gradex::collectives

#endif  // GRADEX_COLLECTIVES_TAG_SPACE_H_
