// UcxTransport: how a request ends: the UCX completion callbacks (and the
// request parameters that name them), progress, its outcome, release or
// abandonment, and wait, test and cancel.
#include <sched.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/ucx/internal.h"

namespace gradex::transport::ucx {
namespace internal {
namespace {

void SendCallback(void* /*request*/, ucs_status_t status, void* user_data) {
  static_cast<Request*>(user_data)->Finish(status);
}

void RecvCallback(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                  void* user_data) {
  auto* r = static_cast<Request*>(user_data);
  r->landed_at = Clock::now();
  r->landed_length = info != nullptr ? info->length : 0;
  r->Finish(status);
}

}  // namespace

ucp_request_param_t SendParam(Request* r) {
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.send = &SendCallback;
  param.user_data = r;
  param.datatype = ucp_dt_make_contig(1);
  return param;
}

ucp_request_param_t RecvParam(Request* r) {
  ucp_request_param_t param = {};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  param.cb.recv = &RecvCallback;
  param.user_data = r;
  param.datatype = ucp_dt_make_contig(1);
  return param;
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
  DrainUnexpected();
  return events;
}

std::string UcxTransport::Describe(const Request& r) const {
  return absl::StrCat("rank ", rank_, ": ", r.is_send ? "send to" : "receive from", " peer ",
                      r.peer, " tag ", r.tag);
}

std::optional<absl::Status> UcxTransport::Outcome(Request& r) {
  if (r.direct && !r.settled && (r.state == State::kDone || r.state == State::kFailed)) {
    SettleDirect(&r);
  }
  switch (r.state) {
    case State::kDone:
    case State::kFailed:
      if (r.refused_bytes > 0) {
        return absl::ResourceExhaustedError(
            absl::StrCat(Describe(r), ": peer ", r.peer, " sent ", r.refused_bytes,
                         " bytes, over the receive cap of ", r.refused_cap));
      }
      if (r.state == State::kDone) return absl::OkStatus();
      return absl::UnavailableError(
          absl::StrCat(Describe(r), " failed: ", ucs_status_string(r.ucx_status),
                       peer_status_[r.peer].ok() ? "" : " (peer failed)"));
    case State::kQueued:
    case State::kInFlight:
      if (absl::IsResourceExhausted(peer_status_[r.peer])) {  // blamed (Blame)
        return absl::ResourceExhaustedError(
            absl::StrCat(Describe(r), ": ", peer_status_[r.peer].message()));
      }
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
    if (r->is_send) {
      pool_.Give(std::move(r->buf));  // UCX is done with it
    } else {
      if (!r->internal) {
        counters_[r->peer].recv_bytes += r->buf.size();
        counters_[r->peer].recv_messages += 1;
        Book(*r);
      }
      if (out != nullptr) *out = std::move(r->buf);
    }
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    return outcome;
  }
  Abandon(std::move(r));
  return outcome;
}

void UcxTransport::Book(const Request& r) {
  using Seconds = std::chrono::duration<double>;
  profile_.receives += 1;
  profile_.match_wait_s += Seconds(r.matched_at - r.posted_at).count();
  profile_.receive_s += Seconds(r.landed_at - r.matched_at).count();
  profile_.alloc_s += r.alloc_s;
  profile_.pooled += r.pooled ? 1 : 0;
  profile_.deliver_s += Seconds(Clock::now() - r.landed_at).count();
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

}  // namespace internal
}  // namespace gradex::transport::ucx
