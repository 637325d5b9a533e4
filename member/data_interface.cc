#include "member/data_interface.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gradex::member {

absl::StatusOr<std::string> DataPlaneIp(const std::string& flag, const std::string& coordinator) {
  if (!flag.empty()) return flag;
  if (std::string env = DataIpFromEnvironment(); !env.empty()) return env;
  std::string host = coordinator, port = "1";
  if (size_t colon = coordinator.rfind(':'); colon != std::string::npos) {
    host = coordinator.substr(0, colon);
    port = coordinator.substr(colon + 1);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("data-plane interface: cannot resolve coordinator '",
                                               host, "': ", gai_strerror(rc), " (set --data-ip)"));
  }
  // A connected UDP socket sends nothing; getsockname gives the source
  // address the kernel's route to the coordinator uses.
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a =
        local.ss_family == AF_INET6
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
    if (inet_ntop(local.ss_family, a, buf, sizeof(buf)) != nullptr) out = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (out.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "data-plane interface: no route to the coordinator '", host, "' (set --data-ip)"));
  }
  return out;
}

}  // namespace gradex::member
