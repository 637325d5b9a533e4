// The plaintext coordinator's loopback check: a name is
// resolved and every address it resolves to must be loopback, and the
// server then listens on the numeric address checked, so what is bound is
// what was checked. A prefix test on the name let "127.attacker.example",
// resolving to 0.0.0.0, listen on every interface in plaintext.
// "localhost" (and names under .localhost) are loopback by definition (RFC
// 6761) and map to 127.0.0.1 without the resolver: a minimal machine or
// container may have no /etc/hosts.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/coordinator/server.h"

namespace gradex::coordinator {

absl::StatusOr<std::string> ResolveLoopback(const std::string& host) {
  const std::string lower = absl::AsciiStrToLower(host);
  if (lower == "localhost" || absl::EndsWith(lower, ".localhost")) return std::string("127.0.0.1");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", host, "' does not resolve (", gai_strerror(rc), ")"));
  }
  std::string first, bad;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    bool loop = false;
    if (a->ai_family == AF_INET) {
      const auto* s = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      loop = (ntohl(s->sin_addr.s_addr) >> 24) == 127;
      inet_ntop(AF_INET, &s->sin_addr, buf, sizeof(buf));
    } else if (a->ai_family == AF_INET6) {
      const auto* s = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      loop = IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
      inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof(buf));
    }
    if (!loop && bad.empty()) bad = buf[0] != '\0' ? buf : "a non-IP address";
    if (loop && first.empty()) first = a->ai_family == AF_INET6 ? absl::StrCat("[", buf, "]") : buf;
  }
  freeaddrinfo(res);
  if (!bad.empty() || first.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", host, "' resolves to ", bad.empty() ? "nothing" : bad, ", not a loopback address"));
  }
  return first;
}

}  // namespace gradex::coordinator
