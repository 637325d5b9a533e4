// The client's checkpoint blob (Client::SaveState / LoadState): the step
// counter and every parameter span's residual. Little-endian, versioned:
//   "GRDXSTAT" | u32 version (1) | u64 step | u64 spans |
//   spans x (u64 key | u64 elements | elements x f32) | u64 FNV-1a of all before.
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
  std::map<uint64_t, std::vector<float>> residuals;  // by ParamSpan::key
};

inline constexpr uint32_t kSavedStateVersion = 1;

std::string EncodeState(const SavedState& state);
absl::StatusOr<SavedState> DecodeState(std::string_view blob);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_SAVED_STATE_H_
