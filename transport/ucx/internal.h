// Internal to the UCX transport: what its pieces share (wire tags, the
// request record, the worker and the communicator classes). Not a public API.
//   worker.cc      UCP context/worker and its address
//   endpoints.cc   wire-up, endpoints, peer errors, abort and teardown
//   post.cc        post sends and receives; buffers to send from
//   receive.cc     match a receive to its message; direct receives, caps
//   unexpected.cc  messages no receive took yet; blame over the cap
//   completion.cc  callbacks, progress, outcome, wait, test, cancel
//   ucx_transport.cc   the public factories
#ifndef GRADEX_TRANSPORT_UCX_INTERNAL_H_
#define GRADEX_TRANSPORT_UCX_INTERNAL_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/buffer_pool.h"
#include "transport/transport.h"
#include "transport/ucx/hello.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::transport::ucx {
namespace internal {

constexpr uint64_t kInternalBit = uint64_t{1} << 63;
constexpr int kRankBits = 12;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr int kGenerationShift = kTagBits + kRankBits;  // bits 60..62
constexpr uint64_t kGenerationMask = uint64_t{7} << kGenerationShift;
// Generations after the current one whose queued messages a new communicator
// keeps (DrainOtherGenerations); the other 4 are taken as earlier ones.
constexpr uint64_t kGenerationsAhead = 3;
constexpr uint64_t kFullMask = ~uint64_t{0};
constexpr uint64_t kWireUpTag = 1;

inline uint64_t WireTag(uint32_t generation, int src, uint64_t tag, bool internal) {
  return (internal ? kInternalBit : 0) |
         ((uint64_t{generation} << kGenerationShift) & kGenerationMask) |
         (static_cast<uint64_t>(src) << kTagBits) | tag;
}

enum class State { kQueued, kInFlight, kDone, kFailed };

// One posted operation. Its address is the UCX request's user_data, so it
// must outlive the UCX request (see UcxTransport::zombies_).
struct Request {
  bool is_send = false;
  bool internal = false;
  int peer = 0;
  uint64_t tag = 0;
  uint64_t wire_tag = 0;
  Bytes buf;
  void* ucx = nullptr;         // UCX request handle while it exists
  size_t capacity = SIZE_MAX;  // a receive: the longest message it takes
  size_t refused_bytes = 0;    // a receive over its cap: the size the peer announced
  size_t refused_cap = 0;      // and the cap it was over
  State state = State::kQueued;
  ucs_status_t ucx_status = UCS_OK;
  // A receive posted to UCX with its buffer (no probe): the message lands
  // where the caller gets it.
  bool direct = false;
  bool settled = false;      // a direct receive's end was handled (SettleDirect)
  size_t landed_length = 0;  // what UCX reported the sender sent
  // Receive timeline (RecvProfile): posted, matched by the probe, last byte in.
  Clock::time_point posted_at, matched_at, landed_at;
  double alloc_s = 0;
  bool pooled = false;  // its buffer came from the pool

  void Finish(ucs_status_t status) {
    ucx_status = status;
    state = status == UCS_OK ? State::kDone : State::kFailed;
  }
};

// The parameters of a send or receive of r's contiguous bytes: UCX's
// completion callback, given r as its user_data, finishes r.
ucp_request_param_t SendParam(Request* r);
ucp_request_param_t RecvParam(Request* r);

// The UCP context and worker; shared by the communicators built on it one
// after another (one per epoch in the agent).
class UcxWorkerImpl final : public UcxWorker {
 public:
  ~UcxWorkerImpl() override;
  absl::Status Init(const UcxOptions& options);
  // Starts the hello listener that hands out this worker's packed address.
  absl::Status Listen(const UcxOptions& options);
  const std::string& address() const override { return address_; }

  void SetJobSecret(const std::string& secret) override;
  uint64_t refused_hellos() const override { return hello_ ? hello_->refused() : 0; }
  uint64_t answered_hellos() const override { return hello_ ? hello_->answered() : 0; }
  std::string job_secret() const;

  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;

  // Requests a closed communicator could not reclaim (UCX may still write
  // into their buffers): freed only after the worker is destroyed.
  std::vector<std::unique_ptr<Request>> orphans;
  // The generation whose communicator is using the worker, if any.
  bool in_use = false;

 private:
  std::string address_;
  std::unique_ptr<HelloServer> hello_;
  mutable std::mutex secret_mu_;
  std::string secret_;  // guarded by secret_mu_
};

class UcxTransport : public Transport {
 public:
  UcxTransport(std::shared_ptr<UcxWorkerImpl> worker, int rank, int size, uint32_t generation,
               const UcxOptions& options)
      : rank_(rank),
        size_(size),
        generation_(generation),
        options_(options),
        w_(std::move(worker)),
        worker_(w_->worker),
        counters_(size),
        pool_(kPoolMinBytes, kPoolBuffers, options.buffer_pool_bytes),
        peer_status_(size),
        early_use_(size) {}
  ~UcxTransport() override;

  absl::Status Connect(const std::vector<std::string>& addresses, Deadline deadline);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override;
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override;
  absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) override;
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override;
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override;
  void CancelAll(Deadline deadline) override;
  void Abort(Deadline deadline) override;
  bool aborted() const override { return aborted_; }
  absl::Status blame(int peer) const override {
    return peer >= 0 && peer < size_ && absl::IsResourceExhausted(peer_status_[peer])
               ? peer_status_[peer]
               : absl::OkStatus();
  }
  PeerCounters counters(int peer) const override {
    return peer >= 0 && peer < size_ ? counters_[peer] : PeerCounters{};
  }
  void ResetCounters() override {
    for (PeerCounters& c : counters_) c = PeerCounters{};
    profile_ = RecvProfile{};
  }
  RecvProfile recv_profile() const override { return profile_; }
  Bytes TakeBuffer(size_t bytes) override;
  void Recycle(Bytes buffer) override { pool_.Give(std::move(buffer)); }

 private:
  struct PeerErrorArg {
    UcxTransport* self;
    int peer;
  };
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);

  absl::Status CheckArgs(int peer, uint64_t tag) const;
  absl::StatusOr<RequestId> StartSend(int peer, uint64_t tag, bool internal, Bytes payload);
  RequestId StartRecv(int peer, uint64_t tag, bool internal, size_t capacity = SIZE_MAX);
  absl::Status WireUp(Deadline deadline);
  absl::Status OpenEndpoint(int peer, const std::string& blob);
  // Receives and drops every queued message of an earlier generation: leftovers
  // of an earlier communicator on this worker (e.g. an aborted epoch).
  void DrainOtherGenerations(Deadline deadline);
  // Drives the worker and matches queued receives; returns the number of
  // UCX events seen (0 means idle).
  int Progress();
  void MatchQueued();
  // Takes every message of this communicator no receive took off UCX's
  // unexpected queue (at most a batch a call) and holds it, unreceived, in
  // early_, counted against its sender; blames a sender over its cap (Blame)
  // and discards the messages of blamed senders and of ranks this
  // communicator lacks.
  void DrainUnexpected();
  // Receives the probed `msg` into one byte and forgets it.
  void Discard(ucp_tag_message_h msg);
  void Blame(int peer);
  size_t EarlyBytesCap() const;
  // Receives the probed message `msg` (`info.length` bytes) into r->buf;
  // r completes now or in RecvCallback.
  void ReceiveProbed(Request* r, ucp_tag_message_h msg, const ucp_tag_recv_info_t& info);
  // Posts r's receive to UCX at once, into a kept buffer of `cap` bytes: for
  // a receive whose size the schedule bounds (UcxOptions::direct_receive_bytes).
  void PostDirect(Request* r, size_t cap);
  // The most a receive posted for `capacity` takes: that, or the
  // process-wide UcxOptions::max_message_bytes when smaller.
  size_t Cap(size_t capacity) const;
  // r's buffer of `bytes`, from the pool where it holds one; books the time
  // and whether it was reused.
  void TakeFromPool(Request* r, size_t bytes);
  // A direct receive that ended: trims the buffer to what came, or books a
  // message longer than the buffer as refused.
  void SettleDirect(Request* r);
  // Non-empty once the request is over (OK or error).
  std::optional<absl::Status> Outcome(Request& r);
  // Adds a delivered receive's timeline to profile_.
  void Book(const Request& r);
  // Releases a finished request, moving a received payload into *out.
  absl::Status Release(RequestId id, absl::Status outcome, Bytes* out);
  // Drops a request the caller no longer wants; an active UCX request is
  // cancelled and kept (with its buffer) until UCX lets go of it.
  void Abandon(std::unique_ptr<Request> r);
  void ReapZombies();
  void Backoff(int events, int& idle);
  // Force-closes every open endpoint, collecting the close requests.
  void ForceCloseEndpoints(std::vector<void*>* pending);
  // Progresses until every request in `reqs` is released or `until` passes.
  void DrainRequests(std::vector<void*>& reqs, Deadline until);
  std::string Describe(const Request& r) const;

  const int rank_;
  const int size_;
  const uint32_t generation_;
  const UcxOptions options_;
  bool aborted_ = false;
  std::shared_ptr<UcxWorkerImpl> w_;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<std::unique_ptr<PeerErrorArg>> error_args_;
  // Per peer, its hello until it gave the peer's address (then null).
  std::vector<std::unique_ptr<HelloClient>> hellos_;
  std::vector<PeerCounters> counters_;
  RecvProfile profile_;
  // Below this a fresh buffer is cheap; the same as direct receives. floor.
  static constexpr size_t kPoolMinBytes = 64 * 1024;
  static constexpr size_t kPoolBuffers = 4;
  BufferPool pool_;
  // OK while the peer is reachable; set by the endpoint error callback.
  std::vector<absl::Status> peer_status_;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  // Receives not yet matched, per wire tag (which names the source), oldest
  // first: only the head may take the next message, which keeps FIFO order.
  std::map<uint64_t, std::deque<Request*>> queued_;
  // Messages no receive took yet (DrainUnexpected), per wire tag, oldest
  // first: UCX's handles, received when a receive of their tag comes (with
  // that receive's cap, as a probed message), and per sender what they hold.
  struct Early {
    ucp_tag_message_h msg;
    ucp_tag_recv_info_t info;
    size_t counted;  // the bytes it counts for: what UCX holds at most
  };
  std::map<uint64_t, std::deque<Early>> early_;
  struct EarlyUse {
    size_t bytes = 0, messages = 0;
  };
  std::vector<EarlyUse> early_use_;
  // Self-sends not yet received, per wire tag.
  std::map<uint64_t, std::deque<Bytes>> self_unmatched_;
  std::vector<std::unique_ptr<Request>> zombies_;
  RequestId next_id_ = 1;
};

}  // namespace internal
}  // namespace gradex::transport::ucx

#endif  // GRADEX_TRANSPORT_UCX_INTERNAL_H_
