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
// A data-plane listener's "IPv4:port" / "[IPv6]:port" (transport/ucx/sockaddr.h).
inline constexpr size_t kMaxUcxAddressBytes = 64;
inline constexpr size_t kMaxUcxVersionBytes = 16;
inline constexpr size_t kMaxUcxTransportsBytes = 256;
inline constexpr size_t kMaxReasonBytes = 256;
inline constexpr size_t kMaxErrorBytes = 512;
// A membership's secret as requests may carry it (member_secret.h makes 32).
inline constexpr size_t kMaxMemberSecretBytes = 64;
inline constexpr size_t kMaxAlgorithmBytes = 64;
inline constexpr size_t kMaxTokenBytes = 4096;
inline constexpr int kMaxLocalRank = 65535;
inline constexpr int kMaxWorldSize = 65536;  // ranks fit the transport's 16-bit tag field
inline constexpr size_t kMaxBuckets = 4096;
inline constexpr size_t kMaxBoundariesPerBucket = kMaxWorldSize - 1;
inline constexpr size_t kMaxBoundariesPerReport = 1 << 20;
// Epoch numbers are 32 bits end to end: the data plane's frames carry them in
// 32 bits (collectives/wire/frame.h) and agents hold them so; the coordinator
// never forms an epoch past kMaxEpoch instead of wrapping.
using EpochNumber = uint32_t;
inline constexpr uint64_t kMaxEpoch = UINT32_MAX;
// A re-registration after a coordinator restart may carry an epoch up to
// this (half the range, so the rebuilt job has 2^31 epochs left); once this
// coordinator has formed an epoch, no member can have run a later one.
inline constexpr uint64_t kMaxRejoinEpoch = uint64_t{1} << 31;
// Steps: no exchange runs faster than this many steps a second (a step is
// at least one round trip between ranks, tens of microseconds even over
// shared memory), so a member's claimed step may lead what the coordinator
// last heard from the job by at most this rate times the time since, plus a
// slack of a few plan barriers (services/coordinator/progress_bounds.cc).
inline constexpr uint64_t kMaxStepsPerSecond = 20000;
inline constexpr uint64_t kMaxStep = uint64_t{1} << 48;
// Server-side message caps (the proto's header comment).
inline constexpr int kMaxReceiveMessageBytes = 8 << 20;
inline constexpr int kMaxSendMessageBytes = 64 << 20;

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_LIMITS_H_
