#include "services/coordinator/service.h"

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "services/coordinator/validate.h"

namespace gradex::coordinator {
namespace {

using gradex::v1::Plan;
using gradex::v1::StepReport;

class Timer {
 public:
  Timer() : start_(absl::Now()) {}
  double seconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }

 private:
  absl::Time start_;
};

template <typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, CoordinatorMetrics* metrics,
                                const char* method, Fn&& fn) {
  Timer t;
  grpc::Status st = fn();
  if (metrics) metrics->ObserveRpc(method, st.error_code(), t.seconds());
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(st);
  return r;
}

// A stream refused before it started (authentication, bad request).
class RefusedWriter final : public grpc::ServerWriteReactor<Plan> {
 public:
  explicit RefusedWriter(grpc::Status st) { Finish(st); }
  void OnDone() override { delete this; }
};
class RefusedReader final : public grpc::ServerReadReactor<StepReport> {
 public:
  explicit RefusedReader(grpc::Status st) { Finish(st); }
  void OnDone() override { delete this; }
};

class WatchReactor;

// The coordinator's handle on a stream; outlives the reactor, which detaches
// it in OnDone, so a late notification never touches a deleted reactor.
class WatchHook final : public PlanWatcher {
 public:
  explicit WatchHook(WatchReactor* r) : r_(r) {}
  void PlanChanged() override;
  void MemberGone() override;
  void Detach() {
    absl::MutexLock lock(&mu_);
    r_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  WatchReactor* r_ ABSL_GUARDED_BY(mu_);
};

// Sends the latest plan whenever it is newer than the last one sent; one
// write in flight at a time, so a slow stream skips versions instead of
// queueing them.
class WatchReactor final : public grpc::ServerWriteReactor<Plan> {
 public:
  WatchReactor(CoordinatorService* svc, uint64_t member, uint64_t known_version)
      : svc_(svc), member_(member), sent_version_(known_version) {}

  void Begin() {
    hook_ = std::make_shared<WatchHook>(this);
    svc_->coordinator()->Subscribe(member_, hook_);
    // Checked after subscribing: an eviction in between is not missed.
    if (!svc_->coordinator()->IsMember(member_)) {
      Gone();
      return;
    }
    Wake();
  }

  void Wake() {
    absl::MutexLock lock(&mu_);
    if (finishing_ || writing_) return;
    std::shared_ptr<const Plan> p = svc_->coordinator()->plan();
    if (!p || p->version() <= sent_version_) return;
    current_ = std::move(p);
    sent_version_ = current_->version();
    writing_ = true;
    StartWrite(current_.get());
  }

  void Gone() {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::NOT_FOUND, "member evicted or left: join again"));
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
        return;
      }
      if (finishing_) {
        FinishLocked(pending_);
        return;
      }
    }
    Wake();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    hook_->Detach();
    svc_->coordinator()->Unsubscribe(hook_.get());
    if (svc_->metrics()) svc_->metrics()->ObserveRpc("WatchPlan", code_, timer_.seconds());
    delete this;
  }

 private:
  // Finish once, and only with no write in flight.
  void FinishLocked(const grpc::Status& st) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (!finishing_) {
      finishing_ = true;
      pending_ = st;
    }
    if (writing_) return;
    finished_ = true;
    code_ = pending_.error_code();
    Finish(pending_);
  }

  CoordinatorService* svc_;
  const uint64_t member_;
  Timer timer_;
  std::shared_ptr<WatchHook> hook_;
  absl::Mutex mu_;
  uint64_t sent_version_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Plan> current_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status pending_ ABSL_GUARDED_BY(mu_);
  int code_ = 0;
};

void WatchHook::PlanChanged() {
  absl::MutexLock lock(&mu_);
  if (r_) r_->Wake();
}

void WatchHook::MemberGone() {
  absl::MutexLock lock(&mu_);
  if (r_) r_->Gone();
}

// Reads reports until the client closes the stream, then acks.
class ReportReactor final : public grpc::ServerReadReactor<StepReport> {
 public:
  ReportReactor(CoordinatorService* svc, gradex::v1::ReportAck* ack) : svc_(svc), ack_(ack) {
    StartRead(&report_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call broke)
      Done(grpc::Status::OK);
      return;
    }
    absl::Status v = ValidateReport(report_);
    if (!v.ok()) {
      Done(ToGrpc(v));
      return;
    }
    bool accepted = false;
    absl::Status st = svc_->coordinator()->Report(report_, absl::Now(), &accepted);
    if (!st.ok()) {
      Done(ToGrpc(st));
      return;
    }
    if (accepted) {
      ack_->set_accepted(ack_->accepted() + 1);
    } else {
      ack_->set_ignored(ack_->ignored() + 1);
    }
    StartRead(&report_);
  }

  void OnDone() override {
    if (svc_->metrics()) svc_->metrics()->ObserveRpc("ReportSteps", code_, timer_.seconds());
    delete this;
  }

 private:
  void Done(const grpc::Status& st) {
    code_ = st.error_code();
    Finish(st);
  }

  CoordinatorService* svc_;
  gradex::v1::ReportAck* ack_;
  StepReport report_;
  Timer timer_;
  int code_ = 0;
};

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status CoordinatorService::Authenticate(const grpc::CallbackServerContext& ctx,
                                              const char* method) const {
  if (auth_.Check(ctx)) return grpc::Status::OK;
  if (metrics_) metrics_->AuthFailure(method);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong job token (metadata 'authorization: Bearer <token>')");
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx,
                                                   const gradex::v1::JoinRequest* req,
                                                   gradex::v1::JoinResponse* resp) {
  return Unary(ctx, metrics_, "Join", [&]() -> grpc::Status {
    if (grpc::Status a = Authenticate(*ctx, "Join"); !a.ok()) return a;
    if (absl::Status v = ValidateJoin(*req); !v.ok()) return ToGrpc(v);
    absl::StatusOr<gradex::v1::JoinResponse> r = coordinator_->Join(*req, absl::Now());
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                        const gradex::v1::HeartbeatRequest* req,
                                                        gradex::v1::HeartbeatResponse* resp) {
  return Unary(ctx, metrics_, "Heartbeat", [&]() -> grpc::Status {
    if (grpc::Status a = Authenticate(*ctx, "Heartbeat"); !a.ok()) return a;
    if (absl::Status v = ValidateHeartbeat(*req); !v.ok()) return ToGrpc(v);
    absl::StatusOr<gradex::v1::HeartbeatResponse> r = coordinator_->Heartbeat(*req, absl::Now());
    if (!r.ok()) return ToGrpc(r.status());
    *resp = std::move(*r);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* ctx,
                                                    const gradex::v1::LeaveRequest* req,
                                                    gradex::v1::LeaveResponse* resp) {
  return Unary(ctx, metrics_, "Leave", [&]() -> grpc::Status {
    if (grpc::Status a = Authenticate(*ctx, "Leave"); !a.ok()) return a;
    if (absl::Status v = ValidateLeave(*req); !v.ok()) return ToGrpc(v);
    return ToGrpc(coordinator_->Leave(*req, absl::Now()));
  });
}

grpc::ServerWriteReactor<Plan>* CoordinatorService::WatchPlan(
    grpc::CallbackServerContext* ctx, const gradex::v1::WatchPlanRequest* req) {
  grpc::Status st = Authenticate(*ctx, "WatchPlan");
  if (st.ok()) st = ToGrpc(ValidateWatch(*req));
  if (!st.ok()) {
    if (metrics_) metrics_->ObserveRpc("WatchPlan", st.error_code(), 0);
    return new RefusedWriter(st);
  }
  auto* r = new WatchReactor(this, req->member_id(), req->known_version());
  r->Begin();
  return r;
}

grpc::ServerReadReactor<StepReport>* CoordinatorService::ReportSteps(
    grpc::CallbackServerContext* ctx, gradex::v1::ReportAck* ack) {
  grpc::Status st = Authenticate(*ctx, "ReportSteps");
  if (!st.ok()) {
    if (metrics_) metrics_->ObserveRpc("ReportSteps", st.error_code(), 0);
    return new RefusedReader(st);
  }
  return new ReportReactor(this, ack);
}

}  // namespace gradex::coordinator
