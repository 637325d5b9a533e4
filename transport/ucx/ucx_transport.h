// Transport over UCX (UCP tag matching): one UCP context and worker per rank,
// endpoints to every peer from addresses exchanged through a Bootstrap.
// Honours UCX_TLS and the other UCX_* environment variables; the options
// below override them for this transport only.
//
// Each worker's address is "IP:port" of a TCP listener of ours (hello.h):
// a peer that proves it holds the job's secret gets the worker's packed UCX
// address there, signed, and opens its endpoint from it. UCX's own sockaddr
// listener, which aborts on a few garbage bytes, is never opened.
//
// Wire tag layout: UCP tag matching carries no source, so bit 63 marks the
// transport's own control messages, bits 60..62 the communicator's generation
// (mod 8), bits 48..59 the sender's rank (so at most 4096 ranks) and bits
// 0..47 the user tag. Receives match all 64 bits.
// Self-sends bypass UCX and are matched locally (no "self" TLS needed).
#ifndef GRADEX_TRANSPORT_UCX_UCX_TRANSPORT_H_
#define GRADEX_TRANSPORT_UCX_UCX_TRANSPORT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace gradex::transport::ucx {

struct UcxOptions {
  // Deadline for bootstrap + endpoint wire-up.
  std::chrono::milliseconds connect_timeout{30000};
  // When non-empty, overrides UCX_TLS (e.g. "tcp", "posix", "sm").
  std::string tls;
  // UCX disables peer-failure handling on posix/sysv shared memory by default,
  // which with our error-handling endpoints would silently push same-host
  // traffic onto TCP. Enabled unless the environment sets the variables.
  bool shm_error_handling = true;
  // How often UCX probes idle peers (UCX_KEEPALIVE_INTERVAL, default 20 s in
  // UCX 1.13): bounds how long a dead peer on a quiet link goes unnoticed.
  // Zero keeps UCX's setting.
  std::chrono::milliseconds keepalive_interval{1000};
  // Teardown budget for flushing and closing endpoints in the destructor.
  std::chrono::milliseconds close_timeout{2000};
  // The IP the worker's listener binds (the data-plane interface); empty:
  // 127.0.0.1. Never the wildcard: the data plane listens on one interface
  // only. Whoever fills the options picks it (the services: --data-ip or
  // $GRADEX_DATA_IP, member/data_interface.h).
  std::string listen_ip;
  // The job's secret (its token): the data-plane hello proves it both ways
  // (hello.h). Members that hold another one cannot connect. Empty is a
  // secret like any other (tests); UcxWorker::SetJobSecret sets it later.
  std::string job_secret;
  // The largest message a receive accepts; a peer announcing more gets its
  // message discarded (UCX truncates it into a 1-byte buffer) and the
  // receive fails naming the size, instead of this process allocating what
  // the peer asked for. 0: unlimited. The agent sets it from its bucket size.
  size_t max_message_bytes = 0;
  // UCX's TCP transport is limited to the interface that holds listen_ip
  // (UCX_NET_DEVICES), unless that variable is set or the machine has an
  // RDMA device (whose names UCX_NET_DEVICES would then have to list too).
  // Without it UCX listens on every interface and stripes large messages
  // over all of them (docs/security.md).
  bool pin_net_device = true;
  // Messages below this go eagerly (copied through UCX's buffers), larger
  // ones by rendezvous. Applied only on a machine with no RDMA device and
  // when UCX_RNDV_THRESH is unset: there UCX 1.13 runs the rendezvous over
  // TCP (with peer error handling it leaves CMA's single copy out), which
  // cost 90 us for a 16 KiB message against 4 us eager on this project's
  // test machine. 0: UCX's own choice (8 KiB there).
  size_t rndv_thresh_bytes = 256 * 1024;
  // Buffers of finished sends are kept (at most 4, and this many bytes in
  // all) for the next large receives: a fresh one costs page faults and a
  // zero fill per message. 0: no pool.
  size_t buffer_pool_bytes = size_t{256} << 20;
  // A receive whose schedule bounds its size (PostRecvAtMost) at this many
  // bytes or more, when a kept buffer holds that bound, is posted to UCX at
  // once with it: the message lands in the buffer the caller gets, with no
  // probe and no bounce through UCX's unexpected queue, and a rendezvous
  // starts as soon as the sender's request arrives. Other receives are
  // received after a probe, at the size the probe tells. 0: always probe.
  size_t direct_receive_bytes = 64 * 1024;
  // Messages no receive has taken yet (sent ahead of their receive, or on
  // tags no schedule receives) are taken off UCX's unexpected queue as they
  // come and held (unreceived: a later receive takes one with its own cap),
  // counted per sender: bytes (what UCX holds: an eager payload, at most
  // 256 KiB a message) and messages. A sender holding more than these is
  // blamed: every receive from and send to it fails RESOURCE_EXHAUSTED naming
  // it, and what it sent and sends is discarded. Without it UCX kept them
  // all (a member flooding unmatched tags grew an honest agent to 1.46 GB).
  // The bytes cap is at least 4 x max_message_bytes. 0 and 0: none of this.
  size_t unexpected_bytes_per_peer = size_t{64} << 20;
  size_t unexpected_messages_per_peer = 16384;
  // Polled while wiring up (may be empty): true ends the connect with
  // ABORTED, e.g. the agent's epoch was superseded while it connected.
  std::function<bool()> abandon;
  // Told which peers the wire-up waits on (may be empty): (peer, true) for
  // every peer as it starts, (peer, false) once that peer's wire-up byte came
  // and ours was sent, or as the wire-up ends. The agent keeps them as waits,
  // so its heartbeats name a peer that stalls its entry.
  std::function<void(int peer, bool waiting)> on_wire_up_wait;
  // When non-zero: once a peer has answered the wire-up, it also ends
  // DEADLINE_EXCEEDED when no other peer answered for this long (the clock
  // restarts at each answer). A member that waits for peers still finishing
  // an older epoch (a late joiner before the barrier) is then timed out from
  // when they arrive, not from when it started.
  std::chrono::milliseconds wire_up_quiet{0};
};

// Creates a UCP worker and connects it to every rank through `bootstrap`.
absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(Bootstrap& bootstrap,
                                                              const UcxOptions& options);

// The same in two halves, for a runtime that must publish its address before
// it knows its peers (the agent joins the coordinator with it) and that builds
// one communicator per epoch on the same worker, so its address stays valid
// for its whole life.
class UcxWorker {
 public:
  virtual ~UcxWorker() = default;
  // The worker's hello listener, "IPv4:port" or "[IPv6]:port"
  // (sockaddr.h, hello.h): peers holding the job's secret get the
  // worker's packed UCX address there.
  virtual const std::string& address() const = 0;
  // The secret hellos prove from now on (both the ones served and the ones
  // this worker's communicators send): the job's token, known once the
  // member joins.
  virtual void SetJobSecret(const std::string& secret) = 0;
  // Hellos refused (bad bytes, a failed proof, silence, over the cap) and
  // answered by this worker's listener.
  virtual uint64_t refused_hellos() const = 0;
  virtual uint64_t answered_hellos() const = 0;
};

absl::StatusOr<std::shared_ptr<UcxWorker>> CreateUcxWorker(const UcxOptions& options);

// The UCX library's "MAJOR.MINOR" (ucp_get_version).
std::string UcxVersion();

// Connects `worker` to every rank's address (this rank's own included, indexed
// by rank) and wires up within options.connect_timeout. One communicator at a
// time per worker: destroy the previous transport first. `generation` (e.g.
// the epoch) keeps communicators apart: messages of an earlier communicator
// still queued on the worker (an aborted epoch's) are dropped, never matched.
absl::StatusOr<std::unique_ptr<Transport>> ConnectUcxTransport(
    std::shared_ptr<UcxWorker> worker, int rank, const std::vector<std::string>& addresses,
    uint32_t generation, const UcxOptions& options);

}  // namespace gradex::transport::ucx

#endif  // GRADEX_TRANSPORT_UCX_UCX_TRANSPORT_H_
