#include "services/coordinator/health_probe.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

namespace gradex::coordinator {

namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";
constexpr size_t kMaxService = 255;  // one length byte: no varint length needed

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("health check: ", s.error_message()));
}

}  // namespace

const char* ServingStatusName(ServingStatus s) {
  switch (s) {
    case ServingStatus::kUnknown:
      return "UNKNOWN";
    case ServingStatus::kServing:
      return "SERVING";
    case ServingStatus::kNotServing:
      return "NOT_SERVING";
    case ServingStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
  }
  return "?";
}

absl::StatusOr<std::string> EncodeHealthRequest(const std::string& service) {
  if (service.size() > kMaxService) {
    return absl::InvalidArgumentError(
        absl::StrCat("service name of ", service.size(), " bytes (at most ", kMaxService, ")"));
  }
  if (service.empty()) return std::string();  // proto3: the default is not sent
  std::string out;
  out.push_back(0x0a);  // field 1, length-delimited
  if (service.size() < 0x80) {
    out.push_back(static_cast<char>(service.size()));
  } else {
    out.push_back(static_cast<char>(0x80 | (service.size() & 0x7f)));
    out.push_back(static_cast<char>(service.size() >> 7));
  }
  return out + service;
}

absl::StatusOr<ServingStatus> DecodeHealthResponse(const std::string& bytes) {
  if (bytes.empty()) return ServingStatus::kUnknown;
  if (bytes.size() != 2 || bytes[0] != 0x08) {
    return absl::DataLossError(
        absl::StrCat("health check: unexpected response of ", bytes.size(), " bytes"));
  }
  const unsigned v = static_cast<unsigned char>(bytes[1]);
  if (v > 3) return absl::DataLossError(absl::StrCat("health check: status ", v, " out of range"));
  return static_cast<ServingStatus>(v);
}

absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& service, absl::Duration timeout) {
  absl::StatusOr<std::string> req = EncodeHealthRequest(service);
  if (!req.ok()) return req.status();
  grpc::Slice slice(*req);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::GenericStub stub(channel);
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, kCheckMethod, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  // The call carries the deadline; the extra second only guards a callback
  // that never comes.
  if (!done.WaitForNotificationWithTimeout(timeout + absl::Seconds(1))) {
    ctx.TryCancel();
    done.WaitForNotification();
  }
  if (!status.ok()) return FromGrpc(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return absl::DataLossError("health check: unreadable response");
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return DecodeHealthResponse(bytes);
}

}  // namespace gradex::coordinator
