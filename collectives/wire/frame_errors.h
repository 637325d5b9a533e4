// Why a received frame was refused, and the process-wide count of refusals
// by reason. A refusal is an error Status and a counter, never a crash or a
// wrong sum (collectives/wire/frame.h).
#ifndef GRADEX_COLLECTIVES_WIRE_FRAME_ERRORS_H_
#define GRADEX_COLLECTIVES_WIRE_FRAME_ERRORS_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace gradex::collectives::wire {

enum class FrameError : int {
  kTruncated = 0,
  kBadMagic,
  kBadVersion,
  kWrongJob,
  kWrongEpoch,
  kWrongStep,
  kWrongAlgorithm,
  kWrongPhase,
  kWrongBlock,
  kBadFlags,
  kOverCapacity,
  kBadLength,
  kIndexOutOfRange,
  kUnsortedIndices,
  kBadQuantized,  // a QSGD payload with a bad scale, code or padding
  kWrongSender,   // the header names another rank than the peer received from
  kNonFinite,     // a NaN or infinite value where the epoch refuses them
  kCount,
};
std::string_view FrameErrorName(FrameError e);

// Counts one refusal for `e` and returns it as DATA_LOSS naming the reason
// and `detail`: what every check of a received frame returns.
absl::Status RejectFrame(FrameError e, std::string_view detail);

// Process-wide counts of rejected frames by reason (exported as metrics).
std::array<uint64_t, static_cast<int>(FrameError::kCount)> FrameErrorCounts();
uint64_t TotalFrameErrors();

}  // namespace gradex::collectives::wire

#endif  // GRADEX_COLLECTIVES_WIRE_FRAME_ERRORS_H_
