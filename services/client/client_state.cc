// SaveState / LoadState (client.h): the pipeline's span state (residuals
// and velocities by span key) and the step counter, through saved_state.h's
// versioned, checked blob.
#include "services/client/client_impl.h"
#include "services/client/saved_state.h"

namespace gradex::client {

absl::StatusOr<std::string> ClientImpl::SaveState() const {
  if (pipeline_ == nullptr) return absl::FailedPreconditionError("gradex client is closed");
  absl::StatusOr<pipeline::SpanState> spans = pipeline_->Export();
  if (!spans.ok()) return spans.status();
  SavedState s;
  s.step = step_.load();
  s.residuals = std::move(spans->residuals);
  s.velocities = std::move(spans->velocities);
  return EncodeState(s);
}

absl::Status ClientImpl::LoadState(std::string_view blob) {
  absl::StatusOr<SavedState> s = DecodeState(blob);
  if (!s.ok()) return s.status();
  if (pipeline_ == nullptr) return absl::FailedPreconditionError("gradex client is closed");
  pipeline::SpanState spans;
  spans.residuals = std::move(s->residuals);
  spans.velocities = std::move(s->velocities);
  if (absl::Status st = pipeline_->Import(std::move(spans), s->step); !st.ok()) return st;
  // Restored before the first epoch; later the running step is kept.
  step_.store(agent_->next_step());
  return absl::OkStatus();
}

}  // namespace gradex::client
