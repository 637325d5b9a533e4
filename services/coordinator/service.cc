#include "services/coordinator/service.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "services/coordinator/validate.h"

namespace gradex::coordinator {
namespace {

using ByteBuffer = grpc::ByteBuffer;

class Timer {
 public:
  Timer() : start_(absl::Now()) {}
  double seconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }

 private:
  absl::Time start_;
};

// INVALID_ARGUMENT when the bytes are not a `T` (gRPC's parser says INTERNAL).
template <typename T>
grpc::Status Parse(const ByteBuffer& in, T* out) {
  ByteBuffer copy(in);  // Deserialize consumes its buffer; this shares the slices
  grpc::Status st = grpc::SerializationTraits<T>::Deserialize(&copy, out);
  if (st.ok()) return st;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      std::string("malformed ") + T::descriptor()->name());
}

template <typename T>
grpc::Status Serialize(const T& msg, ByteBuffer* out) {
  bool own = false;
  return grpc::SerializationTraits<T>::Serialize(msg, out, &own);
}

// A unary call: authenticate, parse, validate, run, serialize, count.
template <typename Req, typename Resp, typename Fn>
grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, CoordinatorMetrics* metrics,
                                grpc::Status auth, const char* method, const ByteBuffer* in,
                                ByteBuffer* out, absl::Status (*validate)(const Req&), Fn&& fn) {
  Timer t;
  grpc::Status st = auth;
  Req req;
  if (st.ok()) st = Parse(*in, &req);
  if (st.ok()) st = ToGrpc(validate(req));
  if (st.ok()) {
    absl::StatusOr<Resp> r = fn(req);
    st = r.ok() ? Serialize(*r, out) : ToGrpc(r.status());
  }
  if (metrics) metrics->ObserveRpc(method, st.error_code(), t.seconds());
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(st);
  return r;
}

// A stream refused before it started (authentication, bad request).
class RefusedWriter final : public grpc::ServerWriteReactor<ByteBuffer> {
 public:
  explicit RefusedWriter(grpc::Status st) { Finish(st); }
  void OnDone() override { delete this; }
};
class RefusedReader final : public grpc::ServerReadReactor<ByteBuffer> {
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
  void Superseded() override;
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
class WatchReactor final : public grpc::ServerWriteReactor<ByteBuffer> {
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
    uint64_t version = 0;
    std::shared_ptr<const ByteBuffer> p = svc_->SerializedPlan(&version);
    if (!p || version <= sent_version_) return;
    current_ = *p;  // shares the slices
    sent_version_ = version;
    writing_ = true;
    StartWrite(&current_);
  }

  void Gone() {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::NOT_FOUND, "member evicted or left: join again"));
  }

  void Superseded() {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::ABORTED,
                              absl::StrCat("a newer WatchPlan stream of member ", member_,
                                           " replaced this one (one stream per member)")));
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
  ByteBuffer current_ ABSL_GUARDED_BY(mu_);
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

void WatchHook::Superseded() {
  absl::MutexLock lock(&mu_);
  if (r_) r_->Superseded();
}

// Reads reports until the client closes the stream, then acks. A report
// that is malformed or over a limit ends the stream (the ones before it
// count).
class ReportReactor final : public grpc::ServerReadReactor<ByteBuffer> {
 public:
  ReportReactor(CoordinatorService* svc, ByteBuffer* ack) : svc_(svc), ack_out_(ack) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call broke)
      Done(Serialize(ack_, ack_out_));
      return;
    }
    gradex::v1::StepReport report;
    grpc::Status st = Parse(in_, &report);
    if (st.ok()) st = ToGrpc(ValidateReport(report));
    if (st.ok()) {
      st = ToGrpc(svc_->coordinator()->Authorize(report.member_id(), report.member_secret()));
    }
    bool accepted = false;
    if (st.ok()) st = ToGrpc(svc_->coordinator()->Report(report, absl::Now(), &accepted));
    if (!st.ok()) {
      Done(st);
      return;
    }
    if (accepted) {
      ack_.set_accepted(ack_.accepted() + 1);
    } else {
      ack_.set_ignored(ack_.ignored() + 1);
    }
    StartRead(&in_);
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
  ByteBuffer* ack_out_;
  gradex::v1::ReportAck ack_;
  ByteBuffer in_;
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

std::shared_ptr<const ByteBuffer> CoordinatorService::SerializedPlan(uint64_t* version) {
  std::shared_ptr<const gradex::v1::Plan> p = coordinator_->plan();
  if (!p) return nullptr;
  absl::MutexLock lock(&plan_mu_);
  if (plan_version_ != p->version() || !plan_bytes_) {
    auto bb = std::make_shared<ByteBuffer>();
    if (!Serialize(*p, bb.get()).ok()) return nullptr;
    plan_bytes_ = std::move(bb);
    plan_version_ = p->version();
  }
  *version = plan_version_;
  return plan_bytes_;
}

grpc::ServerUnaryReactor* CoordinatorService::Join(grpc::CallbackServerContext* ctx,
                                                   const ByteBuffer* in, ByteBuffer* out) {
  return Unary<gradex::v1::JoinRequest, gradex::v1::JoinResponse>(
      ctx, metrics_, Authenticate(*ctx, "Join"), "Join", in, out, &ValidateJoin,
      [&](const gradex::v1::JoinRequest& r) { return coordinator_->Join(r, absl::Now()); });
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(grpc::CallbackServerContext* ctx,
                                                        const ByteBuffer* in, ByteBuffer* out) {
  return Unary<gradex::v1::HeartbeatRequest, gradex::v1::HeartbeatResponse>(
      ctx, metrics_, Authenticate(*ctx, "Heartbeat"), "Heartbeat", in, out, &ValidateHeartbeat,
      [&](const gradex::v1::HeartbeatRequest& r) -> absl::StatusOr<gradex::v1::HeartbeatResponse> {
        absl::Status st = coordinator_->Authorize(r.member_id(), r.member_secret());
        if (!st.ok()) return st;
        return coordinator_->Heartbeat(r, absl::Now());
      });
}

grpc::ServerUnaryReactor* CoordinatorService::Leave(grpc::CallbackServerContext* ctx,
                                                    const ByteBuffer* in, ByteBuffer* out) {
  return Unary<gradex::v1::LeaveRequest, gradex::v1::LeaveResponse>(
      ctx, metrics_, Authenticate(*ctx, "Leave"), "Leave", in, out, &ValidateLeave,
      [&](const gradex::v1::LeaveRequest& r) -> absl::StatusOr<gradex::v1::LeaveResponse> {
        absl::Status st = coordinator_->Authorize(r.member_id(), r.member_secret());
        if (st.ok()) st = coordinator_->Leave(r, absl::Now());
        if (!st.ok()) return st;
        return gradex::v1::LeaveResponse();
      });
}

grpc::ServerWriteReactor<ByteBuffer>* CoordinatorService::WatchPlan(
    grpc::CallbackServerContext* ctx, const ByteBuffer* in) {
  gradex::v1::WatchPlanRequest req;
  grpc::Status st = Authenticate(*ctx, "WatchPlan");
  if (st.ok()) st = Parse(*in, &req);
  if (st.ok()) st = ToGrpc(ValidateWatch(req));
  if (st.ok()) st = ToGrpc(coordinator_->Authorize(req.member_id(), req.member_secret()));
  if (!st.ok()) {
    if (metrics_) metrics_->ObserveRpc("WatchPlan", st.error_code(), 0);
    return new RefusedWriter(st);
  }
  auto* r = new WatchReactor(this, req.member_id(), req.known_version());
  r->Begin();
  return r;
}

grpc::ServerReadReactor<ByteBuffer>* CoordinatorService::ReportSteps(
    grpc::CallbackServerContext* ctx, ByteBuffer* ack) {
  grpc::Status st = Authenticate(*ctx, "ReportSteps");
  if (!st.ok()) {
    if (metrics_) metrics_->ObserveRpc("ReportSteps", st.error_code(), 0);
    return new RefusedReader(st);
  }
  return new ReportReactor(this, ack);
}

}  // namespace gradex::coordinator
