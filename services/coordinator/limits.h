// Limits on every string and repeated field of the gradex.v1 API, as the
// proto comments state them. A request over a limit is INVALID_ARGUMENT.
#ifndef GRADEX_SERVICES_COORDINATOR_LIMITS_H_
#define GRADEX_SERVICES_COORDINATOR_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace gradex::coordinator {

inline constexpr size_t kMaxJobIdBytes = 128;
inline constexpr size_t kMaxAgentIdBytes = 128;
inline constexpr size_t kMaxHostBytes = 255;
inline constexpr size_t kMaxDeviceBytes = 64;
inline constexpr size_t kMaxUcxAddressBytes = 16384;
inline constexpr size_t kMaxReasonBytes = 256;
inline constexpr size_t kMaxErrorBytes = 512;
inline constexpr size_t kMaxAlgorithmBytes = 64;
inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr int kMaxLocalRank = 65535;
inline constexpr int kMaxWorldSize = 65536;  // ranks fit the transport's 16-bit tag field
inline constexpr size_t kMaxBuckets = 4096;
inline constexpr size_t kMaxBoundariesPerBucket = kMaxWorldSize - 1;
inline constexpr size_t kMaxBoundariesPerReport = 1 << 20;
// Server-side message caps (the proto's header comment).
inline constexpr int kMaxReceiveMessageBytes = 8 << 20;
inline constexpr int kMaxSendMessageBytes = 64 << 20;

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_LIMITS_H_
