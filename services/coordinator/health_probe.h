// A client of the standard gRPC health service (grpc.health.v1.Health/Check),
// used by gradex-health-probe (the coordinator image's exec probe where
// Kubernetes' native grpc probe cannot reach it: TLS) and by the tests.
// Messages are encoded by hand (two fields) so no health.proto is needed.
#ifndef GRADEX_SERVICES_COORDINATOR_HEALTH_PROBE_H_
#define GRADEX_SERVICES_COORDINATOR_HEALTH_PROBE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace gradex::coordinator {

// grpc.health.v1.HealthCheckResponse.ServingStatus.
enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* ServingStatusName(ServingStatus s);

// HealthCheckRequest{service}; service is at most 255 bytes.
absl::StatusOr<std::string> EncodeHealthRequest(const std::string& service);
// Validates every byte: only field 1 (varint, 0..3) is accepted, as the
// proto3 default (empty message) means UNKNOWN.
absl::StatusOr<ServingStatus> DecodeHealthResponse(const std::string& bytes);

// One Check call with a deadline. The gRPC error (UNAVAILABLE, NOT_FOUND for
// a service the server does not know, DEADLINE_EXCEEDED) comes back as is.
absl::StatusOr<ServingStatus> CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                                          const std::string& service, absl::Duration timeout);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_HEALTH_PROBE_H_
