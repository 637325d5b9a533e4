// UcxTransport: endpoint creation and wire-up, peer-error handling, and the
// bounded ways out (abort, teardown, force-close, drain).
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "transport/ucx/internal.h"
#include "transport/ucx/sockaddr.h"

namespace gradex::transport::ucx {
namespace internal {

void UcxTransport::OnPeerError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* a = static_cast<PeerErrorArg*>(arg);
  if (a->self->peer_status_[a->peer].ok()) {
    a->self->peer_status_[a->peer] = absl::UnavailableError(absl::StrCat(
        "rank ", a->self->rank_, ": peer ", a->peer, " failed: ", ucs_status_string(status)));
  }
}

absl::Status UcxTransport::Connect(const std::vector<std::string>& addresses, Deadline deadline) {
  if (static_cast<int>(addresses.size()) != size_) {
    return absl::InternalError(absl::StrCat("rank ", rank_, ": got ", addresses.size(),
                                            " addresses for ", size_, " ranks"));
  }
  // Every address is checked before UCX sees any: a malformed one fails
  // this communicator, naming the peer (sockaddr.h).
  std::vector<DataAddress> peers(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    absl::StatusOr<DataAddress> a = ParseDataAddress(addresses[p]);
    if (!a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank_, ": peer ", p, "'s ", a.status().message()));
    }
    peers[p] = *a;
  }
  DrainOtherGenerations(deadline);
  eps_.assign(size_, nullptr);
  error_args_.resize(size_);
  hellos_.clear();
  hellos_.resize(size_);
  const std::string secret = w_->job_secret();
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) hellos_[p] = std::make_unique<HelloClient>(peers[p], secret);
  }
  return WireUp(deadline);
}

// The endpoint to `peer` from the packed address its hello gave (signed with
// the job's secret, so it comes from a member, not from whoever reached us).
absl::Status UcxTransport::OpenEndpoint(int p, const std::string& blob) {
  error_args_[p] = std::make_unique<PeerErrorArg>(PeerErrorArg{this, p});
  ucp_ep_params_t ep_params = {};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                         UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep_params.address = reinterpret_cast<const ucp_address_t*>(blob.data());
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep_params.err_handler.cb = &UcxTransport::OnPeerError;
  ep_params.err_handler.arg = error_args_[p].get();
  ucs_status_t st = ucp_ep_create(worker_, &ep_params, &eps_[p]);
  if (st != UCS_OK) {
    eps_[p] = nullptr;
    return absl::UnavailableError(
        absl::StrCat("rank ", rank_, ": ucp_ep_create to peer ", p, ": ", ucs_status_string(st)));
  }
  return absl::OkStatus();
}

constexpr std::chrono::milliseconds kAbandonPoll{50};

// A one-byte exchange with every peer, so connections exist (and a missing
// peer shows) before the first real message. Every peer's pair of requests
// is polled together, so that the caller hears (on_wire_up_wait) which peers
// are still waited on at any time, not only the one a sequential wait is on.
absl::Status UcxTransport::WireUp(Deadline deadline) {
  struct Pair {
    int peer;
    RequestId recv = 0, send = 0;  // 0 once released
    bool waiting = true;           // until both are released
  };
  std::vector<Pair> pairs;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Pair w{p};
    w.recv = StartRecv(p, kWireUpTag, /*internal=*/true);
    pairs.push_back(w);
  }
  // A peer's endpoint (and our byte to it) waits for its hello; the hellos
  // are driven in the loop below with the other waits.
  size_t hellos_left = pairs.size();
  auto drive_hellos = [&]() -> absl::Status {
    for (Pair& w : pairs) {
      HelloClient* h = hellos_[w.peer].get();
      if (h == nullptr || w.send != 0) continue;
      if (absl::Status s = h->Step(); !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("rank ", rank_, ": peer ", w.peer, ": ", s.message()));
      }
      if (!h->done()) continue;
      if (absl::Status s = OpenEndpoint(w.peer, h->blob()); !s.ok()) return s;
      absl::StatusOr<RequestId> send = StartSend(w.peer, kWireUpTag, /*internal=*/true, Bytes{1});
      if (!send.ok()) return send.status();
      w.send = *send;
      hellos_[w.peer].reset();
      --hellos_left;
    }
    return absl::OkStatus();
  };
  const std::function<void(int, bool)>& tell = options_.on_wire_up_wait;
  if (tell) {
    for (const Pair& w : pairs) tell(w.peer, true);
  }
  size_t left = pairs.size();
  std::optional<Clock::time_point> last_answer;  // set once a peer answered
  absl::Status failed;
  Clock::time_point next_abandon_check = Clock::now() + kAbandonPoll;
  int idle = 0;
  while (left > 0 && failed.ok()) {
    if (hellos_left > 0) {
      failed = drive_hellos();
      if (!failed.ok()) break;
    }
    const int events = Progress();
    for (Pair& w : pairs) {
      if (!w.waiting || (w.send == 0 && hellos_[w.peer] != nullptr)) continue;
      for (RequestId* id : {&w.recv, &w.send}) {
        if (*id == 0 || !failed.ok()) continue;
        std::optional<absl::Status> done = Outcome(*requests_.at(*id));
        if (!done) continue;
        failed = Release(*id, *done, nullptr);
        *id = 0;
      }
      if (!failed.ok()) break;
      if (w.recv == 0 && w.send == 0) {
        w.waiting = false;
        last_answer = Clock::now();
        --left;
        if (tell) tell(w.peer, false);
      }
    }
    if (left == 0 || !failed.ok()) break;
    const Clock::time_point now = Clock::now();
    const bool quiet = options_.wire_up_quiet.count() > 0 && last_answer.has_value() &&
                       now >= *last_answer + options_.wire_up_quiet;
    if (now >= deadline || quiet) {
      std::vector<int> pending;
      for (const Pair& w : pairs) {
        if (w.waiting) pending.push_back(w.peer);
      }
      failed = absl::DeadlineExceededError(
          absl::StrCat("rank ", rank_, ": timed out waiting for peer",
                       pending.size() > 1 ? "s " : " ", absl::StrJoin(pending, ", ")));
    } else if (options_.abandon && now >= next_abandon_check) {
      next_abandon_check = now + kAbandonPoll;
      if (options_.abandon()) {
        failed = absl::AbortedError(absl::StrCat("rank ", rank_, ": abandoned (superseded)"));
      }
    }
    Backoff(events, idle);
  }
  if (failed.ok()) return failed;
  CancelAll(DeadlineIn(options_.close_timeout));
  if (tell) {
    for (const Pair& w : pairs) {
      if (w.waiting) tell(w.peer, false);
    }
  }
  return absl::Status(failed.code(), absl::StrCat("UCX wire-up: ", failed.message()));
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
    // Early messages nobody took: UCX frees them once received.
    for (auto& [tag, q] : early_) {
      for (Early& m : q) Discard(m.msg);
    }
    early_.clear();
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

// Only generations behind this one are leftovers. A newer generation's
// messages belong to a communicator this worker is about to carry: a member
// still entering epoch e can already hold a byte of epoch e+1 from a peer that
// joined e+1 at once (a replacement's wire-up to the server), and dropping it
// leaves that peer's wire-up complete on its side and never on ours. The
// 3 bits split into kGenerationsAhead kept and the rest drained, which are
// drained in turn once they fall behind, before the tag wraps onto them.
void UcxTransport::DrainOtherGenerations(Deadline deadline) {
  std::vector<std::unique_ptr<Request>> drained;
  for (uint64_t g = 0; g <= 7; ++g) {
    const uint64_t ahead = (g - generation_) & 7;
    if (ahead <= kGenerationsAhead) continue;  // 0: this one
    for (;;) {
      ucp_tag_recv_info_t info = {};
      ucp_tag_message_h msg =
          ucp_tag_probe_nb(worker_, g << kGenerationShift, kGenerationMask, 1, &info);
      if (msg == nullptr) break;
      auto r = std::make_unique<Request>();
      ReceiveProbed(r.get(), msg, info);
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

}  // namespace internal
}  // namespace gradex::transport::ucx
