// Small blocking clients for the coordinator tests; every call has a deadline.
#ifndef GRADEX_TESTS_COORDINATOR_CLIENT_UTIL_H_
#define GRADEX_TESTS_COORDINATOR_CLIENT_UTIL_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"

namespace gradex::coordinator {

void SetAuth(grpc::ClientContext* ctx, const std::string& token, absl::Duration deadline);
gradex::v1::JoinRequest JoinRequestFor(const std::string& agent, int local_rank);
absl::StatusOr<gradex::v1::JoinResponse> JoinWith(gradex::v1::Coordinator::StubInterface& stub,
                                                  const std::string& token,
                                                  const gradex::v1::JoinRequest& r);
absl::StatusOr<gradex::v1::JoinResponse> JoinAs(gradex::v1::Coordinator::StubInterface& stub,
                                                const std::string& token, const std::string& agent,
                                                int local_rank);
// `secret`: the member's JoinResponse.member_secret.
grpc::Status Heartbeat(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
                       uint64_t member, const std::string& secret, uint64_t next_step);
grpc::Status SendReports(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
                         const std::vector<gradex::v1::StepReport>& reports,
                         gradex::v1::ReportAck* ack);
// A unary call with raw request bytes.
grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& token, const std::string& method,
                     const std::string& bytes);
// GET http://127.0.0.1:port/path, the body ("" on failure); 5 s deadline.
std::string HttpGet(int port, const std::string& path);
// The gradex_* samples of http://127.0.0.1:port/metrics: "name{labels}" (as
// exposed) -> value.
std::map<std::string, double> ScrapeGradexSamples(int port);

// A WatchPlan stream whose whole life is bounded by `deadline`.
class PlanStream {
 public:
  PlanStream(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
             uint64_t member, const std::string& secret, absl::Duration deadline);
  // Reads plans until one satisfies `want` (true) or the stream ends (false).
  bool NextUntil(gradex::v1::Plan* p, const std::function<bool(const gradex::v1::Plan&)>& want);
  // Reads to the end and returns the stream's status.
  grpc::Status Drain();
  void Cancel() { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderInterface<gradex::v1::Plan>> reader_;
};

}  // namespace gradex::coordinator

#endif  // GRADEX_TESTS_COORDINATOR_CLIENT_UTIL_H_
