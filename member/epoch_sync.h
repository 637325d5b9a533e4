// The agents' in-band agreement, run over the epoch's own transport (never
// through the coordinator), on entering an epoch and at every plan barrier:
// - the step to run next: the largest any member proposes (a rank that
//   completed a step its peers failed does not run it again);
// - whether to leave the epoch: the newest epoch any member has seen;
// - the values all ranks must share (algorithm, density, teams, barrier
//   period, deadline, the algorithms' parameters by catalog name, the per-bucket
//   algorithms): those of the lowest rank's
//   newest eligible plan, carried in the messages themselves, so no rank needs to hold that plan
//   version (the plan stream may skip versions);
// - the per-bucket rules (bucket_choice.h), which each rank is given rather
//   than the plan: the lowest rank's, so a rank given other values still runs
//   what its peers run for every bucket.
// A dissemination all-reduce: ceil(log2 P) rounds of one small message; max,
// and "keep the lowest source rank" are idempotent, so any P works.
#ifndef GRADEX_MEMBER_EPOCH_SYNC_H_
#define GRADEX_MEMBER_EPOCH_SYNC_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "catalog/catalog.h"
#include "collectives/tag_space.h"
#include "member/bucket_choice.h"
#include "member/control_plane.h"
#include "transport/transport.h"

namespace gradex::member {

// The plan fields every rank must agree on, besides the membership.
struct BarrierValues {
  uint64_t plan_version = 0;  // where they came from (for logs and metrics)
  std::string algorithm;      // < 64 bytes
  double density = 0;
  int32_t teams = 1;
  int32_t tau = 64;
  uint32_t step_deadline_ms = 10000;
  catalog::ParamValues params;  // checked against the catalog entries in play
  // Plan.bucket_algorithms, without trailing "" entries (so "" and missing
  // agree); at most catalog::kMaxBucketAlgorithms, each "" or a catalog name.
  std::vector<std::string> bucket_algorithms;
  // The sender's per-bucket rules; within CheckBucketRules' bounds.
  BucketRules rules;

  // The plan's values and this rank's rules (the defaults when out of
  // bounds, so nothing is sent that a receiver refuses).
  static BarrierValues From(const Plan& plan, const BucketRules& rules);
  // The plan's part (the rules are not the plan's).
  void ApplyTo(Plan* plan) const;
};

struct SyncState {
  uint64_t next_step = 0;     // agreed: maximum
  uint64_t newest_epoch = 0;  // agreed: maximum
  int32_t values_rank = 0;    // agreed: the lowest rank's values win
  BarrierValues values;
};

// Phase byte of the agreement's tags (collectives/tag_space.h).
inline constexpr uint16_t kSyncPhase = collectives::kTagPhaseEpochAgreement;

// `sequence` must be the same on every rank and unique among agreements of
// this transport (e.g. the barrier's step). Every received message is checked
// (length, magic, epoch, value ranges) before use. `abandon`, polled while
// waiting, ends the agreement early with ABORTED (e.g. a newer epoch exists,
// so peers of this one may never come).
// One agreement message and its checked decoding (from rank `from` of
// `world`), exposed for tests of the wire bounds.
transport::Bytes EncodeSyncMessage(uint32_t epoch, const SyncState& s);
absl::StatusOr<SyncState> DecodeSyncMessage(const transport::Bytes& b, uint32_t epoch, int from,
                                            int world);

absl::StatusOr<SyncState> AgreeInBand(transport::Transport& transport, uint32_t epoch,
                                      uint64_t sequence, SyncState mine,
                                      transport::Deadline deadline,
                                      const std::function<bool()>& abandon = nullptr);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_EPOCH_SYNC_H_
