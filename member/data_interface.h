// Which interface the agent's data plane listens on:
// --data-ip, else $GRADEX_DATA_IP, else the local address of the route to
// the coordinator (the interface the job's traffic already uses), so a
// loopback job listens on loopback only and nothing listens on 0.0.0.0.
#ifndef GRADEX_MEMBER_DATA_INTERFACE_H_
#define GRADEX_MEMBER_DATA_INTERFACE_H_

#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"

namespace gradex::member {

// $GRADEX_DATA_IP, or "" when unset or empty: the one place the variable is
// read (the transport takes its interface from UcxOptions::listen_ip only).
// Inline so that tools building UcxOptions without the agent library (bench)
// honour it too; their empty listen_ip leaves the transport's 127.0.0.1.
inline std::string DataIpFromEnvironment() {
  const char* env = std::getenv("GRADEX_DATA_IP");
  return env != nullptr ? env : "";
}

// `flag`: --data-ip ("" when not given); `coordinator`: HOST:PORT or
// [IPv6]:PORT. An error names what could not be resolved.
absl::StatusOr<std::string> DataPlaneIp(const std::string& flag, const std::string& coordinator);

}  // namespace gradex::member

#endif  // GRADEX_MEMBER_DATA_INTERFACE_H_
