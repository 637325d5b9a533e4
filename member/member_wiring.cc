#include "member/member_wiring.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "member/data_interface.h"

namespace gradex::member {

absl::StatusOr<MemberWiring> WireMember(MemberWiringOptions options, WiringPart* failed) {
  WiringPart ignored;
  WiringPart& part = failed != nullptr ? *failed : ignored;
  part = WiringPart::kControlPlane;
  MemberWiring w;
  absl::StatusOr<std::unique_ptr<ControlPlane>> control = CreateGrpcControlPlane(options.control);
  if (!control.ok()) return control.status();
  w.control = *std::move(control);
  part = WiringPart::kDataInterface;
  absl::StatusOr<std::string> ip = DataPlaneIp(options.data_ip, options.control.target);
  if (!ip.ok()) return ip.status();
  options.ucx.listen_ip = *ip;
  part = WiringPart::kUcx;
  absl::StatusOr<std::unique_ptr<TransportProvider>> t = CreateUcxProvider(options.ucx);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat("UCX: ", t.status().message()));
  part = WiringPart::kNone;
  w.transports = *std::move(t);
  return w;
}

}  // namespace gradex::member
