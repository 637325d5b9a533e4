// The gRPC service, on gRPC's callback API: a WatchPlan stream costs no
// thread while it waits for the next plan (the sync API would hold one
// thread per agent; a job has thousands), and unary calls run on gRPC's own
// threads without a completion-queue loop of ours.
#ifndef GRADEX_SERVICES_COORDINATOR_SERVICE_H_
#define GRADEX_SERVICES_COORDINATOR_SERVICE_H_

#include "gradex/v1/coordinator.grpc.pb.h"
#include "services/coordinator/auth.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/metrics.h"

namespace gradex::coordinator {

class CoordinatorService final : public gradex::v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Coordinator* coordinator, CoordinatorMetrics* metrics, TokenAuth auth)
      : coordinator_(coordinator), metrics_(metrics), auth_(std::move(auth)) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx,
                                 const gradex::v1::JoinRequest* req,
                                 gradex::v1::JoinResponse* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx,
                                      const gradex::v1::HeartbeatRequest* req,
                                      gradex::v1::HeartbeatResponse* resp) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx,
                                  const gradex::v1::LeaveRequest* req,
                                  gradex::v1::LeaveResponse* resp) override;
  grpc::ServerWriteReactor<gradex::v1::Plan>* WatchPlan(
      grpc::CallbackServerContext* ctx, const gradex::v1::WatchPlanRequest* req) override;
  grpc::ServerReadReactor<gradex::v1::StepReport>* ReportSteps(grpc::CallbackServerContext* ctx,
                                                               gradex::v1::ReportAck* ack) override;

  Coordinator* coordinator() const { return coordinator_; }
  CoordinatorMetrics* metrics() const { return metrics_; }

 private:
  // UNAUTHENTICATED (counted) unless the call carries the job's token.
  grpc::Status Authenticate(const grpc::CallbackServerContext& ctx, const char* method) const;

  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
  TokenAuth auth_;
};

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_SERVICE_H_
