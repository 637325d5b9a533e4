#include "collectives/wire/frame_errors.h"

#include <atomic>
#include <string>

#include "absl/strings/str_cat.h"

namespace gradex::collectives::wire {
namespace {

constexpr int kNumErrors = static_cast<int>(FrameError::kCount);
std::atomic<uint64_t> g_errors[kNumErrors];

}  // namespace

absl::Status RejectFrame(FrameError e, std::string_view detail) {
  g_errors[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
  return absl::DataLossError(
      absl::StrCat("bad frame (", std::string(FrameErrorName(e)), "): ", std::string(detail)));
}

std::string_view FrameErrorName(FrameError e) {
  switch (e) {
    case FrameError::kTruncated:
      return "truncated";
    case FrameError::kBadMagic:
      return "bad_magic";
    case FrameError::kBadVersion:
      return "bad_version";
    case FrameError::kWrongJob:
      return "wrong_job";
    case FrameError::kWrongEpoch:
      return "wrong_epoch";
    case FrameError::kWrongStep:
      return "wrong_step";
    case FrameError::kWrongAlgorithm:
      return "wrong_algorithm";
    case FrameError::kWrongPhase:
      return "wrong_phase";
    case FrameError::kWrongBlock:
      return "wrong_block";
    case FrameError::kBadFlags:
      return "bad_flags";
    case FrameError::kOverCapacity:
      return "over_capacity";
    case FrameError::kBadLength:
      return "bad_length";
    case FrameError::kIndexOutOfRange:
      return "index_out_of_range";
    case FrameError::kUnsortedIndices:
      return "unsorted_indices";
    case FrameError::kBadQuantized:
      return "bad_quantized";
    case FrameError::kWrongSender:
      return "wrong_sender";
    case FrameError::kNonFinite:
      return "non_finite";
    case FrameError::kCount:
      break;
  }
  return "unknown";
}

std::array<uint64_t, static_cast<int>(FrameError::kCount)> FrameErrorCounts() {
  std::array<uint64_t, kNumErrors> c{};
  for (int i = 0; i < kNumErrors; ++i) c[i] = g_errors[i].load(std::memory_order_relaxed);
  return c;
}

uint64_t TotalFrameErrors() {
  uint64_t t = 0;
  for (uint64_t c : FrameErrorCounts()) t += c;
  return t;
}

}  // namespace gradex::collectives::wire
