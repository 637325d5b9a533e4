// One DGS server shard (docs/architecture.md "DGS"; the DGS seed's server
// algorithm, model difference tracking and secondary compression; DESIGN.md
// "DGS"): pure state, no transport, no threads, no clock.
//
// For its contiguous range of the model the shard keeps M (the global
// model), a version (pushes applied so far) and, per worker k, v_k (the sum
// of everything sent to k; a worker's parameters of the range equal v_k),
// kept as d_k = M − v_k: the sum of every push not yet sent to k, exactly
// (each push is added into M and into every joined worker's d_j; a pull
// zeroes what it sends). That spares a pull the pass computing M − v_k.
//   Join(k, values):  (re)joins k; M = values when the shard has no model
//                     yet; the reply is a full sync: M whole, v_k = M.
//   ApplyPush(k, p):  M += p (p is the signed change), d_j += p for every
//                     joined j, version += 1.
//   MakePull(k):      G_k = M − v_k = d_k; the top R% of |G_k| per piece
//                     (R: k's last push ratio; R = 1 sends every nonzero,
//                     as a kDensePull: values of the whole range),
//                     v_k += what is sent (those entries of d_k become 0).
//                     Nothing unsent is lost: it stays in d_k. A full sync
//                     instead (M whole, d_k = 0) when full_sync_every
//                     versions have passed since k's last.
// Staleness of k = version − the version of k's last pull (versions behind).
//
// max_staleness (default unbounded) is kept by making too-fast workers wait:
// MayApply(k) says whether k's push may be applied now. It admits a push
// when, afterwards, the active workers' stalenesses sorted in decreasing
// order s_0 >= s_1 >= ... satisfy s_i <= max_staleness − i. That staircase
// holds after a join and after any push from the most stale worker, so the
// most stale worker is never held (no deadlock) and no worker is ever more
// than max_staleness behind; it needs max_staleness >= workers − 1.
//
// Refusals (never applied, counted by reason in refused()): a push from a
// worker id out of range or not joined, a base version above the shard's, a
// base version other than the one last sent to that worker, one more than
// max_staleness behind, entries outside the range or non-finite, and finite
// entries whose sum into M or a joined worker's d_j would be non-finite
// (kOverflow: M stays finite, so a snapshot never holds a NaN or Inf). The
// exchange also counts here the messages its decoder refused (Count()).
//
// The overflow check costs nothing on the usual path: the shard keeps an
// upper bound on |x| over M and every d_j (it grows by the largest |value|
// of each push applied); only a push whose largest |value| plus that bound
// could pass FLT_MAX is checked entry by entry (and the bound made exact).
#ifndef GRADEX_PS_DGS_SERVER_SHARD_H_
#define GRADEX_PS_DGS_SERVER_SHARD_H_

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ps/dgs_frames.h"
#include "ps/dgs_layout.h"
#include "transport/transport.h"

namespace gradex::ps {

inline constexpr uint64_t kDgsUnboundedStaleness = std::numeric_limits<uint64_t>::max();
inline constexpr uint32_t kDgsMaxWorkers = 65536;

struct DgsServerOptions {
  uint32_t workers = 1;            // worker ids 0 .. workers-1 (1 .. kDgsMaxWorkers)
  uint32_t full_sync_every = 150;  // versions between a worker's full syncs (>= 1)
  uint64_t max_staleness = kDgsUnboundedStaleness;  // >= workers - 1 when bounded
};

// Counters the server role exports (pushes, pulls, bytes are the exchange's).
struct DgsShardStats {
  uint64_t pushes = 0;      // applied
  uint64_t pulls = 0;       // sparse pulls made
  uint64_t full_syncs = 0;  // full syncs made (joins included)
  uint64_t joins = 0;
  uint64_t pushed_entries = 0;  // entries applied into M
  uint64_t pulled_entries = 0;  // entries sent in sparse pulls
};

class DgsServerShard {
 public:
  // INVALID_ARGUMENT naming the field when the range is not inside the
  // layout, or an option is out of range.
  static absl::StatusOr<DgsServerShard> Create(const DgsLayout& layout, uint32_t shard,
                                               DgsRange range, const DgsServerOptions& options);

  // (Re)joins `worker`: marks it active, sets M from `values` (range.size()
  // values) when the shard has no model yet (an empty span then refuses,
  // kNoModel), and fills `reply` with a kFullSync (M, the version), setting
  // v_k = M. Values must be finite when used.
  // `why`, when given, receives the refusal's reason (kNone on success), as
  // for ApplyPush and MakePull.
  absl::Status Join(uint32_t worker, std::span<const float> values, DgsMessage* reply,
                    DgsRefusal* why = nullptr);

  // Applies a decoded kPush or kDensePush (R = 1, range.size() values; see
  // the refusals above). On refusal nothing changes except refused().
  absl::Status ApplyPush(uint32_t worker, const DgsMessage& push, DgsRefusal* why = nullptr);

  // The reply to `worker`'s last push: a kPull (kDensePull at R = 1), or a
  // kFullSync when one is due. `reply`'s buffers are reused.
  absl::Status MakePull(uint32_t worker, DgsMessage* reply, DgsRefusal* why = nullptr);

  // Whether `worker`'s push may be applied now (max_staleness; see above).
  // Always true when unbounded, or for an unknown or inactive worker (its
  // push is then refused by ApplyPush, not held).
  bool MayApply(uint32_t worker) const;

  // A worker that is gone (evicted, dead): no longer counted for staleness;
  // its next message must be a hello.
  void Deactivate(uint32_t worker);

  // Counts a refusal made outside the shard (the exchange's decoder).
  void Count(DgsRefusal reason) { ++refused_[static_cast<size_t>(reason)]; }

  // Snapshot of M and the version (v_k are not kept: every worker rejoins a
  // restored shard and takes a full sync). Layout: "DGSS" magic, format,
  // layout fingerprint, shard id, range, version, M, then FNV-1a 64 of all
  // the bytes before it.
  // FAILED_PRECONDITION when M holds a non-finite value (it cannot, with the
  // refusals above; checked anyway, since a snapshot outlives the process).
  absl::StatusOr<transport::Bytes> Snapshot() const;
  // Replaces M and the version from a snapshot of this layout, shard and
  // range; every worker must rejoin. DATA_LOSS naming what is wrong (length,
  // magic, format, fingerprint, shard, range, checksum, a non-finite value);
  // on refusal the shard is unchanged.
  absl::Status Restore(std::span<const uint8_t> snapshot);

  const DgsLayout& layout() const { return layout_; }
  uint32_t shard() const { return shard_; }
  DgsRange range() const { return range_; }
  const DgsServerOptions& options() const { return options_; }
  bool has_model() const { return has_model_; }
  uint64_t version() const { return version_; }
  bool active(uint32_t worker) const { return worker < active_.size() && active_[worker]; }
  // Versions behind: version() − the version of the worker's last pull.
  uint64_t staleness(uint32_t worker) const;
  // The staleness the worker's last applied push had.
  uint64_t last_push_staleness(uint32_t worker) const;
  std::span<const float> model() const { return m_; }
  // d_k = M − v_k: what the worker has not been sent (empty when inactive).
  std::span<const float> unsent(uint32_t worker) const { return d_[worker]; }
  const DgsRefusalCounts& refused() const { return refused_; }
  uint64_t total_refused() const;
  const DgsShardStats& stats() const { return stats_; }

 private:
  DgsServerShard(const DgsLayout& layout, uint32_t shard, DgsRange range,
                 const DgsServerOptions& options);
  absl::Status Refuse(DgsRefusal reason, std::string_view detail, DgsRefusal* why);
  absl::Status ApplyDense(uint32_t worker, const DgsMessage& push, DgsRefusal* why);
  void Applied(uint32_t worker, const DgsMessage& push, uint64_t entries);
  void FullSync(uint32_t worker, DgsMessage* reply);
  // kOverflow unless every x + values[i] stays finite (x: M's and each joined
  // d_j's entry at ids[i], or at i when ids is empty: a dense push).
  absl::Status CheckSums(std::span<const uint32_t> ids, std::span<const float> values,
                         DgsRefusal* why);
  // The exact bound: max |x| over M and every joined d_j.
  double ExactBound() const;

  DgsLayout layout_;
  uint32_t shard_;
  DgsRange range_;
  DgsServerOptions options_;
  std::vector<DgsRange> pieces_;
  bool has_model_ = false;
  uint64_t version_ = 0;
  std::vector<float> m_;
  std::vector<std::vector<float>> d_;  // per worker: M − v_k
  std::vector<uint8_t> active_;
  std::vector<uint64_t> pulled_at_;  // version of each worker's last pull
  std::vector<uint64_t> synced_at_;  // version of each worker's last full sync
  std::vector<float> ratio_;         // each worker's last push ratio
  std::vector<uint64_t> push_staleness_;
  double bound_ = 0;  // >= |x| for every x of M and of every d_j (see above)
  DgsRefusalCounts refused_{};
  DgsShardStats stats_;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_SERVER_SHARD_H_
