// The agent's step: BeginStep / EndStep and its report (agent.h). Epoch
// entry and plan barriers live in agent.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pipeline/agent.h"

namespace gradex::pipeline {
namespace {

double Seconds(transport::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::Status Agent::set_next_step(uint64_t step) {
  if (transport_ != nullptr || step_open_ || last_epoch_ != 0) {
    return absl::FailedPreconditionError("the step counter is set before the first epoch only");
  }
  next_step_ = step;
  return absl::OkStatus();
}

absl::Status Agent::BeginStep() {
  if (step_open_) return absl::FailedPreconditionError("BeginStep: a step is already open");
  step_open_ = true;
  step_ran_ = false;
  step_status_ = absl::OkStatus();
  step_buckets_.clear();
  step_stats_.clear();
  step_blame_.Clear();
  step_start_ = transport::Clock::now();
  step_unix_start_ = std::chrono::system_clock::now();
  step_compute_s_ =
      last_step_end_ == transport::Clock::time_point{} ? 0 : Seconds(step_start_ - last_step_end_);
  retired_.reset();
  step_transport_ = nullptr;
  absl::Status s;
  if (transport_ == nullptr) {
    s = EnterEpoch();
  } else if (plan_->tau > 0 && next_step_ % static_cast<uint64_t>(plan_->tau) == 0 &&
             next_step_ != synced_at_) {
    s = Barrier();
  }
  begin_status_ = s;
  if (!s.ok()) {
    step_status_ = s;
    return s;
  }
  step_ran_ = true;
  UpdateLayout();
  step_transport_ = transport_.get();
  waits_->SetStep(plan_->epoch, next_step_);
  return absl::OkStatus();
}

void Agent::UpdateLayout() {
  if (layout_epoch_ == plan_->epoch && !layout_line_.empty()) return;
  std::vector<std::string> nodes;
  nodes.reserve(plan_->members.size());
  for (const member::PlanMember& m : plan_->members) nodes.push_back(m.node);
  layout_ = catalog::LayoutOf(nodes);
  layout_epoch_ = plan_->epoch;
  const std::string why = rules_.hierarchy ? catalog::FlatReason(layout_) : "hierarchy=off";
  hierarchical_ = why.empty();
  layout_line_ = hierarchical_ ? absl::StrCat("hierarchical (", layout_.Describe(), ")")
                               : absl::StrCat("flat (", why, ")");
}

absl::Status Agent::EndStep(StepOutcome* out) {
  if (!step_open_) return absl::FailedPreconditionError("EndStep: no open step");
  step_open_ = false;
  step_transport_ = nullptr;
  retired_.reset();
  const uint64_t step = next_step_;
  if (out != nullptr && plan_ != nullptr) {
    out->step = step;
    out->epoch = plan_->epoch;
    out->rank = rank_;
    out->world = plan_->world();
    out->plan_version = plan_->version;
    out->algorithm = plan_->algorithm;
    out->density = plan_->density;
  }
  if (!step_status_.ok()) {
    // A step that ran is spent (its gradients stay in the residuals); one
    // that could not begin is tried again under the same number.
    if (step_ran_) ++next_step_;
    return step_status_;
  }
  ++next_step_;
  last_step_end_ = transport::Clock::now();
  if (out != nullptr) out->seconds = Seconds(last_step_end_ - step_start_);
  if (metrics_ != nullptr) {
    metrics_->StepOk();
    metrics_->SyncCounters(control_->report_drops());
  }
  Report(step);
  return absl::OkStatus();
}

void Agent::Report(uint64_t step) {
  auto ns = [](std::chrono::system_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  member::StepReport r;
  r.comm_start_unix_ns = ns(step_unix_start_);
  r.comm_end_unix_ns = ns(std::chrono::system_clock::now());
  r.epoch = plan_->epoch;
  r.step = step;
  r.rank = rank_;
  r.compute_s = step_compute_s_;
  for (const collectives::CallStats& s : step_stats_) {
    r.total_s += s.total_s;
    r.selection_s += s.phases.selection_s;
    r.communication_s += s.phases.communication_s;
    r.reduction_s += s.phases.reduction_s;
    r.sent_bytes += s.sent_bytes;
    r.recv_bytes += s.recv_bytes;
    r.result_nnz += s.result_nnz;
  }
  for (const member::StepReport::Bucket& b : step_buckets_) {
    r.post_gather_count += b.post_gather_count;
    r.kprime_used = std::max(r.kprime_used, b.kprime_used);
  }
  r.buckets = std::move(step_buckets_);
  step_buckets_.clear();
  if (link_ && link_epoch_ == r.epoch) r.link = link_;
  control_->ReportStep(std::move(r));  // drops, never blocks
}

}  // namespace gradex::pipeline
