// Server shards of a parameter-server job (DGS): how many, and
// which SERVER member holds each. Pure logic with the clock passed in and no
// locks; the Coordinator serialises calls and puts the result in the plan
// (Plan.ps) and its membership view (log, metrics).
//
// A shard is the s-th of S contiguous ranges of the model's layout
// (ps/dgs_layout.h cuts it on both ends; the coordinator never sees
// the model). S is fixed the first time an epoch is assigned (the configured
// count, else one per distinct host of that epoch's members) and never
// changes afterwards: a server's model slice and its snapshots are for one
// range, and a changed cut would scatter them.
#ifndef GRADEX_SERVICES_COORDINATOR_CONTROLLERS_SERVER_SHARDS_H_
#define GRADEX_SERVICES_COORDINATOR_CONTROLLERS_SERVER_SHARDS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "catalog/catalog.h"

namespace gradex::coordinator::controllers {

// At most this many shards (the catalog's bound, which the DGS data plane
// checks too).
inline constexpr uint32_t kMaxServerShards = catalog::kMaxParameterServerShards;

// The parameter range [first, last) of each of `shards` shards of a model of
// `total` elements: contiguous, in order, the first total % shards one
// element longer. The same cut as ps/dgs_layout.h's SplitShards
// (server_shards_test checks it against that); the coordinator keeps its own
// copy because it links no collectives. Empty when shards == 0.
struct ShardRange {
  uint64_t first = 0, last = 0;
};
std::vector<ShardRange> ShardRanges(uint64_t total, uint32_t shards);
// The same for a model of these layers (the job's ps.layer_sizes).
std::vector<ShardRange> ShardRanges(const std::vector<uint32_t>& layer_sizes, uint32_t shards);

// One member of an epoch, in rank order, as the assignment sees it.
struct ShardCandidate {
  uint64_t member_id = 0;
  std::string host;
  bool server = false;
};

struct ShardAssignment {
  uint32_t shards = 0;
  std::vector<int> rank_of_shard;  // shard s -> the rank of the SERVER member holding it
  // Per rank: the worker's slot (its id at the servers), -1 for a SERVER.
  std::vector<int> slot_of_rank;
};

class ServerShards {
 public:
  // `configured`: the job's server_shards (0: one per host), at most
  // kMaxServerShards; `slots`: worker ids the servers keep state for (the
  // job's largest worker count).
  ServerShards(uint32_t configured, int slots) : configured_(configured), slots_(slots) {}

  // Assigns the shards over `roster` (rank order): shard s goes to the
  // (s mod n)-th of the n SERVER members in rank order, so a restarted server
  // that keeps its rank gets its shards back. Each worker keeps its slot for
  // as long as it is on the roster (its momentum and the servers' v_k are
  // keyed by it); a new worker takes the lowest free one. FAILED_PRECONDITION
  // when the roster has no SERVER member (the shards then stay unserved, and
  // unserved_since() says since when) or more workers than slots.
  absl::StatusOr<ShardAssignment> Assign(const std::vector<ShardCandidate>& roster, absl::Time now);

  // 0 until the first assignment fixes it.
  uint32_t shards() const { return shards_; }
  // Since when no SERVER member holds the shards (InfiniteFuture: served).
  absl::Time unserved_since() const { return unserved_since_; }
  // How many times a shard moved to another member (server restarts, losses).
  uint64_t moves() const { return moves_; }
  // The member holding shard s in the last assignment (0: none yet).
  uint64_t holder(uint32_t shard) const { return shard < holders_.size() ? holders_[shard] : 0; }

 private:
  absl::Status AssignSlots(const std::vector<ShardCandidate>& roster, std::vector<int>* slots);

  uint32_t configured_;
  int slots_;
  std::vector<uint64_t> slot_holder_;  // member id per slot (0: free)
  uint32_t shards_ = 0;
  std::vector<uint64_t> holders_;  // member id per shard, last assignment
  absl::Time unserved_since_ = absl::InfiniteFuture();
  uint64_t moves_ = 0;
};

}  // namespace gradex::coordinator::controllers

#endif  // GRADEX_SERVICES_COORDINATOR_CONTROLLERS_SERVER_SHARDS_H_
