// One-line timestamped log to stderr (the coordinator's log).
#ifndef GRADEX_SERVICES_COORDINATOR_LOG_H_
#define GRADEX_SERVICES_COORDINATOR_LOG_H_

#include <cstdio>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gradex::coordinator {

// A member's text as one log field: newlines and other control bytes
// escaped (C-style), so a member cannot forge log lines.
inline std::string Quote(absl::string_view member_text) { return absl::CEscape(member_text); }

template <typename... Args>
void Log(const Args&... args) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
                   " gradex-coordinator: ", args..., "\n");
  std::fputs(line.c_str(), stderr);
}

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_LOG_H_
