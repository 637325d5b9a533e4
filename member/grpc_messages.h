// The agent's types as gradex.v1 messages and back, and the channel, for
// the gRPC control plane (grpc_control_plane.cc).
#ifndef GRADEX_MEMBER_GRPC_MESSAGES_H_
#define GRADEX_MEMBER_GRPC_MESSAGES_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gradex/v1/coordinator.pb.h"
#include "member/control_plane.h"
#include "member/grpc_control_plane.h"

namespace gradex::member {

// A gRPC status as an absl::Status, the message prefixed with `what`.
absl::Status FromGrpc(const grpc::Status& s, const char* what);
// A coordinator's plan as the agent's Plan; an error when a field is out of
// range (the plan is then ignored).
absl::StatusOr<Plan> ToPlan(const gradex::v1::Plan& m, uint64_t version_offset);
// A step report for member `member`, carrying its secret.
gradex::v1::StepReport ToProto(const StepReport& r, uint64_t member, const std::string& secret);
// A join request; `next_step`: the step the agent reported it runs next.
gradex::v1::JoinRequest JoinToProto(const JoinRequest& j, uint64_t next_step);
// The running epoch and the oldest long wait of `w` into a heartbeat.
void FillWait(const WaitSource& w, gradex::v1::HeartbeatRequest* req);
// With TLS, a join the coordinator answered by closing the session: under
// mutual TLS that is how a missing or unaccepted client certificate shows
// (TLS 1.3 servers reject it after the client's side of the handshake, and
// the client sees only "Socket closed"), not a coordinator that is absent.
bool LooksLikeTlsRefusal(const GrpcControlPlaneOptions& options, const absl::Status& s);
absl::Status TlsRefused(const GrpcControlPlaneOptions& options, const absl::Status& s);
// The channel to the coordinator (TLS when options.tls_ca is set).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CoordinatorChannel(
    const GrpcControlPlaneOptions& options);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_GRPC_MESSAGES_H_
