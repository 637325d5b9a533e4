// The gRPC service, on gRPC's callback API: a WatchPlan stream costs no
// thread while it waits for the next plan (the sync API would hold one
// thread per agent; a job has thousands), and unary calls run on gRPC's own
// threads without a completion-queue loop of ours. The methods are "raw"
// (bytes in, bytes out) so that (1) bytes that do not parse are answered
// INVALID_ARGUMENT (gRPC's own parser would say INTERNAL) and (2) a plan is
// serialized once per version, not once per watching agent.
#ifndef GRADEX_SERVICES_COORDINATOR_SERVICE_H_
#define GRADEX_SERVICES_COORDINATOR_SERVICE_H_

#include <memory>

#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "grpcpp/support/byte_buffer.h"
#include "services/coordinator/auth.h"
#include "services/coordinator/coordinator.h"
#include "services/coordinator/metrics.h"

namespace gradex::coordinator {

using RawService = gradex::v1::Coordinator::WithRawCallbackMethod_Join<
    gradex::v1::Coordinator::WithRawCallbackMethod_Heartbeat<
        gradex::v1::Coordinator::WithRawCallbackMethod_Leave<
            gradex::v1::Coordinator::WithRawCallbackMethod_WatchPlan<
                gradex::v1::Coordinator::WithRawCallbackMethod_ReportSteps<
                    gradex::v1::Coordinator::Service>>>>>;

class CoordinatorService final : public RawService {
 public:
  CoordinatorService(Coordinator* coordinator, CoordinatorMetrics* metrics, TokenAuth auth)
      : coordinator_(coordinator), metrics_(metrics), auth_(std::move(auth)) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                 grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchPlan(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* ReportSteps(grpc::CallbackServerContext* ctx,
                                                         grpc::ByteBuffer* ack) override;

  Coordinator* coordinator() const { return coordinator_; }
  CoordinatorMetrics* metrics() const { return metrics_; }
  // The latest plan, serialized once per version (null before the first).
  std::shared_ptr<const grpc::ByteBuffer> SerializedPlan(uint64_t* version);

 private:
  // UNAUTHENTICATED (counted) unless the call carries the job's token.
  grpc::Status Authenticate(const grpc::CallbackServerContext& ctx, const char* method) const;

  Coordinator* coordinator_;
  CoordinatorMetrics* metrics_;
  TokenAuth auth_;
  absl::Mutex plan_mu_;
  uint64_t plan_version_ ABSL_GUARDED_BY(plan_mu_) = 0;
  std::shared_ptr<const grpc::ByteBuffer> plan_bytes_ ABSL_GUARDED_BY(plan_mu_);
};

grpc::Status ToGrpc(const absl::Status& s);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_SERVICE_H_
