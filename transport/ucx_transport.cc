#include "transport/ucx_transport.h"

#include <sched.h>
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace gradex {
namespace {

constexpr uint64_t kInternalBit = uint64_t{1} << 63;
constexpr int kRankBits = 12;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr int kGenerationShift = kTagBits + kRankBits;  // bits 60..62
constexpr uint64_t kGenerationMask = uint64_t{7} << kGenerationShift;
constexpr uint64_t kFullMask = ~uint64_t{0};
constexpr uint64_t kWireUpTag = 1;

uint64_t WireTag(uint32_t generation, int src, uint64_t tag, bool internal) {
  return (internal ? kInternalBit : 0) |
         ((uint64_t{generation} << kGenerationShift) & kGenerationMask) |
         (static_cast<uint64_t>(src) << kTagBits) | tag;
}

// Whether the effective UCX_TLS may select posix/sysv: UCX warns about
// every configuration key that no transport consumed.
bool MayUseSharedMemory(const std::string& tls_option) {
  std::string tls = tls_option;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env == nullptr ? "all" : env;
  }
  if (!tls.empty() && tls[0] == '^') return true;
  for (absl::string_view t : absl::StrSplit(tls, ',')) {
    if (t == "all" || t == "sm" || t == "shm" || t == "posix" || t == "sysv") return true;
  }
  return false;
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
  void* ucx = nullptr;  // UCX request handle while it exists
  State state = State::kQueued;
  ucs_status_t ucx_status = UCS_OK;

  void Finish(ucs_status_t status) {
    ucx_status = status;
    state = status == UCS_OK ? State::kDone : State::kFailed;
  }
};

void SendCallback(void* /*request*/, ucs_status_t status, void* user_data) {
  static_cast<Request*>(user_data)->Finish(status);
}

void RecvCallback(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* /*info*/,
                  void* user_data) {
  static_cast<Request*>(user_data)->Finish(status);
}

// The UCP context and worker; shared by the communicators built on it one
// after another (one per epoch in the agent).
class UcxWorkerImpl final : public UcxWorker {
 public:
  ~UcxWorkerImpl() override;
  absl::Status Init(const UcxOptions& options);
  const std::string& address() const override { return address_; }

  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  // Requests a closed communicator could not reclaim (UCX may still write
  // into their buffers): freed only after the worker is destroyed.
  std::vector<std::unique_ptr<Request>> orphans;
  // The generation whose communicator is using the worker, if any.
  bool in_use = false;

 private:
  std::string address_;
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
        peer_status_(size) {}
  ~UcxTransport() override;

  absl::Status Connect(const std::vector<std::string>& addresses, Deadline deadline);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override;
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override;
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override;
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override;
  void CancelAll(Deadline deadline) override;
  void Abort(Deadline deadline) override;
  bool aborted() const override { return aborted_; }
  PeerCounters counters(int peer) const override {
    return peer >= 0 && peer < size_ ? counters_[peer] : PeerCounters{};
  }
  void ResetCounters() override {
    for (PeerCounters& c : counters_) c = PeerCounters{};
  }

 private:
  struct PeerErrorArg {
    UcxTransport* self;
    int peer;
  };
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);

  absl::Status CheckArgs(int peer, uint64_t tag) const;
  absl::StatusOr<RequestId> StartSend(int peer, uint64_t tag, bool internal, Bytes payload);
  RequestId StartRecv(int peer, uint64_t tag, bool internal);
  absl::Status WireUp(Deadline deadline);
  // Receives and drops every queued message of another generation: leftovers
  // of an earlier communicator on this worker (e.g. an aborted epoch).
  void DrainOtherGenerations(Deadline deadline);
  // Drives the worker and matches queued receives; returns the number of
  // UCX events seen (0 means idle).
  int Progress();
  void MatchQueued();
  // Non-empty once the request is over (OK or error).
  std::optional<absl::Status> Outcome(Request& r);
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
  std::vector<PeerCounters> counters_;
  // OK while the peer is reachable; set by the endpoint error callback.
  std::vector<absl::Status> peer_status_;
  std::map<RequestId, std::unique_ptr<Request>> requests_;
  // Receives not yet matched, per wire tag (which names the source), oldest
  // first: only the head may take the next message, which keeps FIFO order.
  std::map<uint64_t, std::deque<Request*>> queued_;
  // Self-sends not yet received, per wire tag.
  std::map<uint64_t, std::deque<Bytes>> self_unmatched_;
  std::vector<std::unique_ptr<Request>> zombies_;
  RequestId next_id_ = 1;
};

void UcxTransport::OnPeerError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* a = static_cast<PeerErrorArg*>(arg);
  if (a->self->peer_status_[a->peer].ok()) {
    a->self->peer_status_[a->peer] = absl::UnavailableError(absl::StrCat(
        "rank ", a->self->rank_, ": peer ", a->peer, " failed: ", ucs_status_string(status)));
  }
}

UcxWorkerImpl::~UcxWorkerImpl() {
  for (auto& r : orphans) {
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    r->ucx = nullptr;
  }
  // The orphans' buffers die only after this.
  if (worker != nullptr) ucp_worker_destroy(worker);
  if (context != nullptr) ucp_cleanup(context);
}

absl::Status UcxWorkerImpl::Init(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return absl::InternalError(absl::StrCat("ucp_config_read: ", ucs_status_string(st)));
  }
  auto modify = [&](const char* name, const std::string& value) -> absl::Status {
    ucs_status_t s = ucp_config_modify(config, name, value.c_str());
    if (s != UCS_OK) {
      return absl::InvalidArgumentError(
          absl::StrCat("UCX config ", name, "=", value, ": ", ucs_status_string(s)));
    }
    return absl::OkStatus();
  };
  absl::Status s;
  if (!options.tls.empty()) s = modify("TLS", options.tls);
  // Environment settings win over our defaults.
  if (s.ok() && options.shm_error_handling) {
    // UCP hands unknown keys to each UCT interface table without the
    // component prefix; in UCX 1.13 the flag sits in the "MM_" sub-table, so
    // this one key covers both posix and sysv (checked against ucp_ep_create).
    if (std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
        std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr && MayUseSharedMemory(options.tls)) {
      s = modify("MM_ERROR_HANDLING", "y");
    }
  }
  if (s.ok() && options.keepalive_interval.count() > 0 &&
      std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    s = modify("KEEPALIVE_INTERVAL", absl::StrCat(options.keepalive_interval.count(), "ms"));
  }
  if (!s.ok()) {
    ucp_config_release(config);
    return s;
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) {
    context = nullptr;
    return absl::InternalError(absl::StrCat("ucp_init: ", ucs_status_string(st)));
  }
  // Serialized rather than single: the owner may hand the transport to
  // another thread (e.g. an agent's progress thread), never concurrently.
  ucp_worker_params_t wparams = {};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(context, &wparams, &worker);
  if (st != UCS_OK) {
    worker = nullptr;
    return absl::InternalError(absl::StrCat("ucp_worker_create: ", ucs_status_string(st)));
  }
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  st = ucp_worker_get_address(worker, &address, &address_length);
  if (st != UCS_OK) {
    return absl::InternalError(absl::StrCat("ucp_worker_get_address: ", ucs_status_string(st)));
  }
  address_.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  return absl::OkStatus();
}

absl::Status UcxTransport::Connect(const std::vector<std::string>& addresses, Deadline deadline) {
  if (static_cast<int>(addresses.size()) != size_) {
    return absl::InternalError(absl::StrCat("rank ", rank_, ": got ", addresses.size(),
                                            " addresses for ", size_, " ranks"));
  }
  DrainOtherGenerations(deadline);
  eps_.assign(size_, nullptr);
  error_args_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    error_args_[p] = std::make_unique<PeerErrorArg>(PeerErrorArg{this, p});
    ucp_ep_params_t ep_params = {};
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep_params.address = reinterpret_cast<const ucp_address_t*>(addresses[p].data());
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep_params.err_handler.cb = &UcxTransport::OnPeerError;
    ep_params.err_handler.arg = error_args_[p].get();
    if (addresses[p].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": no UCX address for peer ", p));
    }
    ucs_status_t st = ucp_ep_create(worker_, &ep_params, &eps_[p]);
    if (st != UCS_OK) {
      eps_[p] = nullptr;
      return absl::UnavailableError(
          absl::StrCat("rank ", rank_, ": ucp_ep_create to peer ", p, ": ", ucs_status_string(st)));
    }
  }
  return WireUp(deadline);
}

// A one-byte exchange with every peer, so connections exist (and a missing
// peer shows) before the first real message.
absl::Status UcxTransport::WireUp(Deadline deadline) {
  std::vector<RequestId> ids;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    ids.push_back(StartRecv(p, kWireUpTag, /*internal=*/true));
    absl::StatusOr<RequestId> send = StartSend(p, kWireUpTag, /*internal=*/true, Bytes{1});
    if (!send.ok()) return send.status();
    ids.push_back(*send);
  }
  for (RequestId id : ids) {
    absl::Status s = Wait(id, deadline, nullptr);
    if (!s.ok()) {
      CancelAll(DeadlineIn(options_.close_timeout));
      return absl::Status(s.code(), absl::StrCat("UCX wire-up: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// Teardown in three bounded steps: (1) cancel our requests; (2) flush live
// endpoints so eagerly completed sends still reach their peers; (3) close
// every endpoint in force mode, which also completes (as cancelled) sends UCX
// cannot cancel, such as a rendezvous nobody matched. Closing in flush mode
// instead could leave such a request on the endpoint when the budget runs
// out, and UCX 1.13 asserts on that in ucp_worker_destroy.
UcxTransport::~UcxTransport() {
  if (worker_ != nullptr) {
    const Deadline deadline = DeadlineIn(options_.close_timeout);
    CancelAll(Clock::now() + options_.close_timeout / 4);
    std::vector<void*> pending;
    for (int p = 0; p < static_cast<int>(eps_.size()); ++p) {
      if (eps_[p] == nullptr || !peer_status_[p].ok()) continue;  // a failed ep cannot flush
      ucp_request_param_t param = {};
      ucs_status_ptr_t r = ucp_ep_flush_nbx(eps_[p], &param);
      if (UCS_PTR_IS_PTR(r)) pending.push_back(r);
    }
    DrainRequests(pending, Clock::now() + (deadline - Clock::now()) / 2);
    ForceCloseEndpoints(&pending);
    DrainRequests(pending, std::max(deadline, Clock::now() + std::chrono::milliseconds(100)));
    ReapZombies();
    // UCX releases these when they complete; their buffers stay alive with
    // the worker, which may carry the next communicator.
    for (auto& z : zombies_) {
      if (z->ucx != nullptr) ucp_request_free(z->ucx);
      z->ucx = nullptr;
      w_->orphans.push_back(std::move(z));
    }
    zombies_.clear();
  }
  if (w_ != nullptr) w_->in_use = false;
}

void UcxTransport::DrainOtherGenerations(Deadline deadline) {
  std::vector<std::unique_ptr<Request>> drained;
  for (uint64_t g = 0; g <= 7; ++g) {
    if (g == (generation_ & 7)) continue;
    for (;;) {
      ucp_tag_recv_info_t info = {};
      ucp_tag_message_h msg =
          ucp_tag_probe_nb(worker_, g << kGenerationShift, kGenerationMask, 1, &info);
      if (msg == nullptr) break;
      auto r = std::make_unique<Request>();
      r->buf.resize(info.length);
      r->state = State::kInFlight;
      ucp_request_param_t param = {};
      param.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
      param.cb.recv = &RecvCallback;
      param.user_data = r.get();
      param.datatype = ucp_dt_make_contig(1);
      ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), info.length, msg, &param);
      if (UCS_PTR_IS_ERR(p)) {
        r->Finish(UCS_PTR_STATUS(p));
      } else if (p == nullptr) {
        r->Finish(UCS_OK);
      } else {
        r->ucx = p;
      }
      drained.push_back(std::move(r));
    }
  }
  int idle = 0;
  for (auto& r : drained) {
    while (r->state == State::kInFlight && Clock::now() < deadline) {
      Backoff(static_cast<int>(ucp_worker_progress(worker_)), idle);
    }
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    r->ucx = nullptr;
    if (r->state == State::kInFlight) w_->orphans.push_back(std::move(r));
  }
}

// Force-closing our endpoints drops the connections, which the peers' error
// callbacks see (at once over TCP, within the keepalive over shared memory).
void UcxTransport::Abort(Deadline deadline) {
  if (aborted_ || worker_ == nullptr) return;
  aborted_ = true;
  CancelAll(deadline);
  for (size_t p = 0; p < eps_.size(); ++p) {
    if (eps_[p] == nullptr) continue;
    peer_status_[p] = absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  }
  std::vector<void*> pending;
  ForceCloseEndpoints(&pending);
  DrainRequests(pending, deadline);
}

void UcxTransport::ForceCloseEndpoints(std::vector<void*>* pending) {
  for (ucp_ep_h& ep : eps_) {
    if (ep == nullptr) continue;
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(r)) pending->push_back(r);
    ep = nullptr;
  }
}

// Unfinished at the deadline: UCX releases them when they complete.
void UcxTransport::DrainRequests(std::vector<void*>& reqs, Deadline until) {
  int idle = 0;
  while (!reqs.empty() && Clock::now() < until) {
    int events = static_cast<int>(ucp_worker_progress(worker_));
    for (size_t i = 0; i < reqs.size();) {
      if (ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
        ucp_request_free(reqs[i]);
        reqs[i] = reqs.back();
        reqs.pop_back();
      } else {
        ++i;
      }
    }
    Backoff(events, idle);
  }
  for (void* r : reqs) ucp_request_free(r);
  reqs.clear();
}

absl::Status UcxTransport::CheckArgs(int peer, uint64_t tag) const {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": peer ", peer, " out of range [0, ", size_, ")"));
  }
  if (tag > kMaxTag) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": tag ", tag, " exceeds kMaxTag ", kMaxTag));
  }
  return absl::OkStatus();
}

absl::StatusOr<RequestId> UcxTransport::PostSend(int peer, uint64_t tag, Bytes payload) {
  if (absl::Status s = CheckArgs(peer, tag); !s.ok()) return s;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  const size_t n = payload.size();
  absl::StatusOr<RequestId> id = StartSend(peer, tag, /*internal=*/false, std::move(payload));
  if (id.ok()) {
    counters_[peer].sent_bytes += n;
    counters_[peer].sent_messages += 1;
  }
  return id;
}

absl::StatusOr<RequestId> UcxTransport::PostRecv(int peer, uint64_t tag) {
  if (absl::Status s = CheckArgs(peer, tag); !s.ok()) return s;
  if (aborted_) return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " aborted"));
  return StartRecv(peer, tag, /*internal=*/false);
}

absl::StatusOr<RequestId> UcxTransport::StartSend(int peer, uint64_t tag, bool internal,
                                                  Bytes payload) {
  auto r = std::make_unique<Request>();
  r->is_send = true;
  r->internal = internal;
  r->peer = peer;
  r->tag = tag;
  r->wire_tag = WireTag(generation_, rank_, tag, internal);
  if (peer == rank_) {
    self_unmatched_[r->wire_tag].push_back(std::move(payload));
    r->state = State::kDone;
  } else {
    if (!peer_status_[peer].ok()) return peer_status_[peer];
    r->buf = std::move(payload);
    r->state = State::kInFlight;
    ucp_request_param_t param = {};
    param.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send = &SendCallback;
    param.user_data = r.get();
    param.datatype = ucp_dt_make_contig(1);
    ucs_status_ptr_t p =
        ucp_tag_send_nbx(eps_[peer], r->buf.data(), r->buf.size(), r->wire_tag, &param);
    if (UCS_PTR_IS_ERR(p)) {
      return absl::UnavailableError(absl::StrCat("rank ", rank_, ": send to peer ", peer, " tag ",
                                                 tag, ": ", ucs_status_string(UCS_PTR_STATUS(p))));
    }
    if (p == nullptr) {
      r->state = State::kDone;
    } else {
      r->ucx = p;
    }
  }
  RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  return id;
}

RequestId UcxTransport::StartRecv(int peer, uint64_t tag, bool internal) {
  auto r = std::make_unique<Request>();
  r->internal = internal;
  r->peer = peer;
  r->tag = tag;
  r->wire_tag = WireTag(generation_, peer, tag, internal);
  r->state = State::kQueued;
  queued_[r->wire_tag].push_back(r.get());
  RequestId id = next_id_++;
  requests_.emplace(id, std::move(r));
  // Match right away if the message is already here (cheap: a probe).
  MatchQueued();
  return id;
}

void UcxTransport::MatchQueued() {
  for (auto it = queued_.begin(); it != queued_.end();) {
    std::deque<Request*>& q = it->second;
    while (!q.empty()) {
      Request* r = q.front();
      if (r->peer == rank_) {
        auto self = self_unmatched_.find(r->wire_tag);
        if (self == self_unmatched_.end()) break;
        r->buf = std::move(self->second.front());
        self->second.pop_front();
        if (self->second.empty()) self_unmatched_.erase(self);
        r->state = State::kDone;
        q.pop_front();
        continue;
      }
      ucp_tag_recv_info_t info = {};
      ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, r->wire_tag, kFullMask, 1, &info);
      if (msg == nullptr) break;
      q.pop_front();
      r->buf.resize(info.length);
      r->state = State::kInFlight;
      ucp_request_param_t param = {};
      param.op_attr_mask =
          UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
      param.cb.recv = &RecvCallback;
      param.user_data = r;
      param.datatype = ucp_dt_make_contig(1);
      ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), info.length, msg, &param);
      if (UCS_PTR_IS_ERR(p)) {
        r->Finish(UCS_PTR_STATUS(p));
      } else if (p == nullptr) {
        r->Finish(UCS_OK);
      } else {
        r->ucx = p;
      }
    }
    it = q.empty() ? queued_.erase(it) : std::next(it);
  }
}

int UcxTransport::Progress() {
  if (!zombies_.empty()) ReapZombies();
  int events = 0;
  // Bounded so a busy worker cannot starve the matching below.
  for (int i = 0; i < 64; ++i) {
    unsigned n = ucp_worker_progress(worker_);
    if (n == 0) break;
    events += static_cast<int>(n);
  }
  MatchQueued();
  return events;
}

std::string UcxTransport::Describe(const Request& r) const {
  return absl::StrCat("rank ", rank_, ": ", r.is_send ? "send to" : "receive from", " peer ",
                      r.peer, " tag ", r.tag);
}

std::optional<absl::Status> UcxTransport::Outcome(Request& r) {
  switch (r.state) {
    case State::kDone:
      return absl::OkStatus();
    case State::kFailed:
      return absl::UnavailableError(
          absl::StrCat(Describe(r), " failed: ", ucs_status_string(r.ucx_status),
                       peer_status_[r.peer].ok() ? "" : " (peer failed)"));
    case State::kQueued:
    case State::kInFlight:
      if (!peer_status_[r.peer].ok()) {
        return absl::UnavailableError(
            absl::StrCat(Describe(r), ": peer ", r.peer, " is dead or unreachable"));
      }
      return std::nullopt;
  }
  return std::nullopt;
}

absl::Status UcxTransport::Release(RequestId id, absl::Status outcome, Bytes* out) {
  auto it = requests_.find(id);
  std::unique_ptr<Request> r = std::move(it->second);
  requests_.erase(it);
  if (outcome.ok()) {
    if (!r->is_send) {
      if (!r->internal) {
        counters_[r->peer].recv_bytes += r->buf.size();
        counters_[r->peer].recv_messages += 1;
      }
      if (out != nullptr) *out = std::move(r->buf);
    }
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    return outcome;
  }
  Abandon(std::move(r));
  return outcome;
}

void UcxTransport::Abandon(std::unique_ptr<Request> r) {
  if (r->state == State::kQueued) {
    auto q = queued_.find(r->wire_tag);
    if (q != queued_.end()) {
      std::erase(q->second, r.get());
      if (q->second.empty()) queued_.erase(q);
    }
    return;
  }
  if (r->ucx == nullptr) return;
  if (r->state == State::kInFlight) {
    ucp_request_cancel(worker_, r->ucx);
    zombies_.push_back(std::move(r));
    return;
  }
  ucp_request_free(r->ucx);
}

void UcxTransport::ReapZombies() {
  for (size_t i = 0; i < zombies_.size();) {
    if (zombies_[i]->state != State::kInFlight) {
      ucp_request_free(zombies_[i]->ucx);
      zombies_[i] = std::move(zombies_.back());
      zombies_.pop_back();
    } else {
      ++i;
    }
  }
}

// Busy-polls while there is traffic, then yields and finally sleeps briefly,
// so idle ranks sharing cores do not starve the ones doing work.
void UcxTransport::Backoff(int events, int& idle) {
  if (events > 0) {
    idle = 0;
    return;
  }
  ++idle;
  if (idle < 64) return;
  if (idle < 1024) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

absl::Status UcxTransport::Wait(RequestId id, Deadline deadline, Bytes* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank_, ": unknown request ", id));
  }
  Request& r = *it->second;
  int idle = 0;
  for (;;) {
    int events = Progress();
    if (std::optional<absl::Status> done = Outcome(r)) return Release(id, *done, out);
    if (Clock::now() >= deadline) {
      // The request stays posted: the caller may Wait again or CancelAll.
      return absl::DeadlineExceededError(absl::StrCat(Describe(r), " timed out"));
    }
    Backoff(events, idle);
  }
}

absl::StatusOr<bool> UcxTransport::Test(RequestId id, Bytes* out) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank_, ": unknown request ", id));
  }
  Progress();
  std::optional<absl::Status> done = Outcome(*it->second);
  if (!done) return false;
  absl::Status s = Release(id, *done, out);
  if (!s.ok()) return s;
  return true;
}

void UcxTransport::CancelAll(Deadline deadline) {
  queued_.clear();
  for (auto& [id, r] : requests_) {
    if (r->state == State::kQueued) continue;  // never reached UCX
    if (r->ucx == nullptr) continue;
    if (r->state == State::kInFlight) {
      ucp_request_cancel(worker_, r->ucx);
      zombies_.push_back(std::move(r));
    } else {
      ucp_request_free(r->ucx);
    }
  }
  requests_.clear();
  int idle = 0;
  while (!zombies_.empty() && Clock::now() < deadline) {
    int events = Progress();
    Backoff(events, idle);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<UcxWorker>> CreateUcxWorker(const UcxOptions& options) {
  auto w = std::make_shared<UcxWorkerImpl>();
  if (absl::Status s = w->Init(options); !s.ok()) return s;
  return std::shared_ptr<UcxWorker>(std::move(w));
}

namespace {

absl::StatusOr<std::unique_ptr<Transport>> Connect(std::shared_ptr<UcxWorker> worker, int rank,
                                                   const std::vector<std::string>& addresses,
                                                   uint32_t generation, const UcxOptions& options,
                                                   Deadline deadline) {
  const int size = static_cast<int>(addresses.size());
  if (size <= 0 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("UCX transport: rank ", rank, " of ", size,
                                                   " (at most ", kMaxRanks, " ranks)"));
  }
  auto impl = std::dynamic_pointer_cast<UcxWorkerImpl>(worker);
  if (impl == nullptr) return absl::InvalidArgumentError("UCX transport: not a UCX worker");
  if (impl->in_use) {
    return absl::FailedPreconditionError(
        "UCX transport: the worker still carries another communicator");
  }
  impl->in_use = true;
  auto t = std::make_unique<UcxTransport>(std::move(impl), rank, size, generation, options);
  if (absl::Status s = t->Connect(addresses, deadline); !s.ok()) return s;
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectUcxTransport(
    std::shared_ptr<UcxWorker> worker, int rank, const std::vector<std::string>& addresses,
    uint32_t generation, const UcxOptions& options) {
  return Connect(std::move(worker), rank, addresses, generation, options,
                 DeadlineIn(options.connect_timeout));
}

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(Bootstrap& bootstrap,
                                                              const UcxOptions& options) {
  const int rank = bootstrap.rank(), size = bootstrap.size();
  if (size <= 0 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("UCX transport: rank ", rank, " of ", size,
                                                   " (at most ", kMaxRanks, " ranks)"));
  }
  const Deadline deadline = DeadlineIn(options.connect_timeout);
  absl::StatusOr<std::shared_ptr<UcxWorker>> worker = CreateUcxWorker(options);
  if (!worker.ok()) return worker.status();
  absl::StatusOr<std::vector<std::string>> all =
      bootstrap.AllGather((*worker)->address(), deadline);
  if (!all.ok()) return all.status();
  if (static_cast<int>(all->size()) != size) {
    return absl::InternalError(absl::StrCat("rank ", rank, ": bootstrap returned ", all->size(),
                                            " addresses for ", size, " ranks"));
  }
  return Connect(*std::move(worker), rank, *all, /*generation=*/0, options, deadline);
}

}  // namespace gradex
