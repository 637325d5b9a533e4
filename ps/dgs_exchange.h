// DGS over a Transport (docs/architecture.md "DGS"): the worker's push-pull
// and the server's serving loop. No sockets, no threads of their own; every
// wait has a deadline; every received byte goes through dgs_frames.h's
// decoders, capped at DgsMaxMessageBytes before it is received.
//
// Tags (collectives/tag_space.h, phase kTagPhaseDgs): worker -> shard s on
// DgsUpTag(s), shard s -> worker on DgsDownTag(s), so that one rank may host
// several shards on one transport.
//
// There is no barrier between workers: a shard answers each worker's push
// with that worker's pull as soon as it is applied, whatever the others do.
#ifndef GRADEX_PS_DGS_EXCHANGE_H_
#define GRADEX_PS_DGS_EXCHANGE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "collectives/tag_space.h"
#include "ps/dgs_frames.h"
#include "ps/dgs_server_shard.h"
#include "ps/dgs_worker.h"
#include "transport/transport.h"

namespace gradex::ps {

inline constexpr uint64_t DgsUpTag(uint32_t shard) {
  return collectives::MessageTag(collectives::kTagPhaseDgs, shard, 1);
}
inline constexpr uint64_t DgsDownTag(uint32_t shard) {
  return collectives::MessageTag(collectives::kTagPhaseDgs, shard, 2);
}

// The identity every DGS message of a job carries (frames check it).
struct DgsJob {
  uint64_t job_id = 0;
  uint32_t epoch = 0;
};

// Where shard `shard` (index into DgsWorkerState::shard_ranges()) lives.
struct DgsShardPeer {
  uint32_t shard = 0;
  int rank = 0;
};

// What one worker step moved (this call only).
struct DgsStepStats {
  uint64_t sent_bytes = 0;
  uint64_t recv_bytes = 0;
  uint64_t pushed_entries = 0;
  uint64_t pulled_entries = 0;  // entries of sparse pulls applied
  uint32_t full_syncs = 0;      // full syncs applied (joins included)
  uint32_t hellos = 0;
  // Full syncs at a version below this worker's last from that shard (a
  // shard restored from an older snapshot), and the versions they went back.
  uint32_t version_gaps = 0;
  uint64_t versions_lost = 0;
};

// The worker side, one per worker and transport. Step() is one DGS worker
// step against every shard: a hello (and its full sync) to every shard it
// has not joined, then SAMomentum (DgsWorkerState::MakePush), the push split
// by shard range, sent to every shard at once, and every shard's reply
// applied to params. A shard that answers "not joined" (it restarted) or
// "stale version" is rejoined inside the step: hello, full sync, and the same
// push again on the new base, so nothing is lost. Any other refusal or
// failure makes the state leave that shard (the next Step says hello and
// re-syncs) and Step returns the error naming the shard; replies to requests
// given up on are dropped by their request number. A push the shard did not
// apply (refused, or never sent) is put back into the velocity exactly
// (DgsWorkerState::Unsend) and the error says so; one whose fate is unknown
// (no reply before the deadline, an unreadable reply) is not put back then
// (the error says so): the next hello's full sync names the worker's last
// push the shard did not apply (DgsMessageHeader::unapplied), and if it is
// that one it is put back before the next push.
class DgsPushPull {
 public:
  // `shards` must name every shard of the state once.
  DgsPushPull(transport::Transport& transport, DgsJob job, std::vector<DgsShardPeer> shards);

  absl::Status Step(DgsWorkerState& state, std::span<const float> grad, std::span<float> params,
                    float lr, transport::Deadline deadline, DgsStepStats* stats = nullptr);

  // Joins every shard not joined yet (hello + full sync into params) without
  // pushing: a worker's (re)start.
  absl::Status Join(DgsWorkerState& state, std::span<float> params, transport::Deadline deadline,
                    DgsStepStats* stats = nullptr);

  // Tells every joined shard that this worker is done (kLeave; no reply), so
  // that it no longer holds the others back under max_staleness.
  absl::Status Leave(DgsWorkerState& state, transport::Deadline deadline);

 private:
  struct Pending {
    std::optional<transport::RequestId> recv;  // the receive posted for the shard's next reply
    // A request was given up on (or its reply lost) and no later reply has
    // matched since: its reply may still come, so an unnumbered refusal
    // (request 0, a message the shard could not read) cannot be told apart.
    bool doubt = false;
    // The request number of the last push whose fate is unknown (no reply),
    // 0 when none: put back at the next hello if the shard's full sync says
    // it was not applied (DgsMessageHeader::unapplied).
    uint32_t unknown_push = 0;
  };
  // 1, 2, ...: never 0, the number of a refusal of an unreadable message.
  uint32_t NextRequest() {
    if (next_request_ == 0) next_request_ = 1;
    return next_request_++;
  }
  absl::Status Hello(DgsWorkerState& state, size_t i, std::span<float> params,
                     transport::Deadline deadline, DgsStepStats* stats);
  // Decodes shard i's reply to `request` into *out (dropping replies to
  // requests given up on).
  absl::Status AwaitReply(const DgsWorkerState& state, size_t i, uint32_t request,
                          transport::Deadline deadline, DgsStepStats* stats, DgsMessage* out);

  transport::Transport& transport_;
  DgsJob job_;
  std::vector<DgsShardPeer> shards_;
  std::vector<Pending> pending_;
  uint32_t next_request_ = 1;
  DgsPush push_;            // the last step's push (its room reused)
  DgsMessage reply_;        // the last reply decoded (its room reused)
  transport::Bytes spare_;  // the last reply's bytes, decoded: room for the next push
};

// What a DgsServer did since it was built.
struct DgsServerStats {
  uint64_t messages_in = 0;
  uint64_t messages_out = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t refused = 0;  // messages answered with kRefused
  uint64_t held = 0;     // pushes held by max_staleness (counted once each)
  uint64_t workers_lost = 0;
  // Of them, workers the transport blamed for flooding this server with
  // messages no receive took (Transport::blame), and the last blame.
  uint64_t workers_blamed = 0;
  std::string last_blame;
  // Hellos from a worker that had a later version of this shard than the
  // shard has (restored from an older snapshot): counted, with the last one.
  uint64_t version_gaps = 0;
  uint64_t last_gap = 0;  // versions the shard is behind that worker
  uint32_t last_gap_worker = 0;
  uint64_t last_gap_worker_version = 0;
};

// The server side of one shard on a transport: one receive posted per worker
// (PostRecvAtMost, capped at DgsMaxMessageBytes of the shard's range),
// re-posted after each message; a hello is answered with a full sync, a push
// with the worker's pull (or held while max_staleness says wait, then
// answered), a leave deactivates the worker; a refused message is answered
// with kRefused. A worker whose receive fails
// (a dead peer) is deactivated and no longer served; the others go on.
class DgsServer {
 public:
  // worker_ranks[k] is the transport rank of worker k (shard.options().workers entries).
  DgsServer(transport::Transport& transport, DgsJob job, DgsServerShard& shard,
            std::vector<int> worker_ranks);

  // Serves until `until`: returns OK then (a serving window; call again to go
  // on), or an error only when the transport itself fails for every worker.
  // Polls without blocking past `until`.
  absl::Status ServeUntil(transport::Deadline until);
  // Handles what has arrived, without waiting; true when it handled anything.
  absl::StatusOr<bool> Poll();

  const DgsServerStats& stats() const { return stats_; }
  DgsServerShard& shard() { return shard_; }

 private:
  absl::Status Post(uint32_t worker);
  absl::Status Handle(uint32_t worker, transport::Bytes message);
  absl::Status ApplyAndReply(uint32_t worker, const DgsMessage& push);
  DgsMessage in_;                    // the message being handled (its room reused)
  DgsMessage reply_;                 // the reply being made (its room reused)
  transport::Bytes spare_;           // the last message decoded: room for the next reply
  std::vector<uint32_t> unapplied_;  // per worker: see DgsMessageHeader::unapplied
  absl::Status Reply(uint32_t worker, transport::Bytes message);
  absl::Status Refused(uint32_t worker, uint32_t request, DgsRefusal why);
  void ServeHeld();
  void ReapSends();
  void Lose(uint32_t worker);

  transport::Transport& transport_;
  DgsJob job_;
  DgsServerShard& shard_;
  std::vector<int> ranks_;
  DgsWireContext ctx_;
  uint64_t cap_ = 0;
  std::vector<std::optional<transport::RequestId>> recvs_;
  std::vector<uint8_t> lost_;
  std::vector<std::optional<DgsMessage>> held_;
  std::vector<std::pair<uint32_t, transport::RequestId>> sends_;  // (worker, send)
  DgsServerStats stats_;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_DGS_EXCHANGE_H_
