// SaveState / LoadState (client.h): the residuals by span key and the step
// counter, through saved_state.h's versioned, checked blob.
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/client/client_impl.h"
#include "services/client/saved_state.h"

namespace gradex::client {

absl::Status ClientImpl::AwaitIdle() const {
  if (std::this_thread::get_id() == worker_.get_id() ||
      std::this_thread::get_id() == selector_.get_id()) {
    return absl::FailedPreconditionError(
        "gradex SaveState/LoadState from a bucket's done callback would wait for itself");
  }
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), absl::FromChrono(options_.timeout))) {
    return absl::DeadlineExceededError(
        absl::StrCat("gradex: buckets still in flight after ", options_.timeout.count(), " ms"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ClientImpl::SaveState() const {
  // The buckets issued so far end first (their residuals are being written).
  if (absl::Status s = AwaitIdle(); !s.ok()) return s;
  absl::MutexLock lock(&state_mu_);
  if (step_open_) {
    return absl::FailedPreconditionError(
        "SaveState inside a step (its last bucket, last_in_step, has not run yet)");
  }
  SavedState s;
  s.step = step_.load();
  s.residuals = residuals_.Export();
  return EncodeState(s);
}

absl::Status ClientImpl::LoadState(std::string_view blob) {
  absl::StatusOr<SavedState> s = DecodeState(blob);
  if (!s.ok()) return s.status();
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty()) {
      return absl::FailedPreconditionError("LoadState while buckets are queued (Flush first)");
    }
  }
  if (absl::Status s = AwaitIdle(); !s.ok()) return s;
  absl::MutexLock lock(&state_mu_);
  if (step_open_) {
    return absl::FailedPreconditionError(
        "LoadState inside a step (its last bucket, last_in_step, has not run yet)");
  }
  // Before the first epoch the step comes from the checkpoint; later the
  // running step is kept (ranks agree on it in-band).
  if (agent_ != nullptr && agent_->set_next_step(s->step).ok()) step_.store(s->step);
  residuals_.Import(std::move(s->residuals));
  return absl::OkStatus();
}

}  // namespace gradex::client
