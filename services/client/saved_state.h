// The client's checkpoint blob (Client::SaveState / LoadState): the step
// counter, every parameter span's residual and (momentum correction) its
// velocity. Little-endian, versioned:
//   "GRDXSTAT" | u32 version (2) | u64 step | map (residuals) | map (velocities)
//   | u64 FNV-1a of all before, where a map is
//   u64 spans | spans x (u64 key | u64 elements | elements x f32).
// Version 1 (no velocities) is still read.
// Decode checks every count against the bytes that remain before it
// allocates, refuses duplicate keys and a bad checksum: a malformed blob is
// INVALID_ARGUMENT, never a crash.
#ifndef GRADEX_SERVICES_CLIENT_SAVED_STATE_H_
#define GRADEX_SERVICES_CLIENT_SAVED_STATE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace gradex::client {

struct SavedState {
  uint64_t step = 0;
  std::map<uint64_t, std::vector<float>> residuals;   // by ParamSpan::key
  std::map<uint64_t, std::vector<float>> velocities;  // spans that have one
};

inline constexpr uint32_t kSavedStateVersion = 2;

std::string EncodeState(const SavedState& state);
absl::StatusOr<SavedState> DecodeState(std::string_view blob);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_SAVED_STATE_H_
