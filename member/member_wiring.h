// A member's data plane, wired in one place: the control plane to the
// coordinator and the UCX transports on the member's data interface. Every
// member (a trainer's client, a parameter-server worker, a hosted server,
// gradex-agent) joins through here, so the interface choice and the UCX
// options a coordinator hands to peers are the same everywhere.
#ifndef GRADEX_MEMBER_MEMBER_WIRING_H_
#define GRADEX_MEMBER_MEMBER_WIRING_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "member/control_plane.h"
#include "member/grpc_control_plane.h"
#include "member/transport_provider.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::member {

struct MemberWiringOptions {
  GrpcControlPlaneOptions control;  // `target`: the coordinator's HOST:PORT
  // The data interface asked for (--data-ip, ClientOptions::data_ip; "":
  // GRADEX_DATA_IP, else the interface that routes to the coordinator).
  std::string data_ip;
  transport::ucx::UcxOptions ucx;  // all but listen_ip, which the data interface sets
};

struct MemberWiring {
  std::unique_ptr<ControlPlane> control;
  std::unique_ptr<TransportProvider> transports;
};

// Which part of the wiring failed (gradex-agent exits 2 for the control
// plane's and the interface's, 1 for UCX's).
enum class WiringPart { kNone, kControlPlane, kDataInterface, kUcx };

// The control plane first (no RPC yet: Join is the member's), then the data
// interface and the UCX transports on it; an error names which part failed
// (UCX's with "UCX: ") and, when `failed` is given, sets it.
absl::StatusOr<MemberWiring> WireMember(MemberWiringOptions options, WiringPart* failed = nullptr);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_MEMBER_WIRING_H_
