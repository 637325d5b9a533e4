#include "transport/ucx/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gradex::transport::ucx {

absl::StatusOr<DataAddress> ParseDataAddress(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("data-plane address '", absl::CHexEscape(text.substr(0, kMaxDataAddressBytes)),
                     "' ", why, " (expected IPv4:port or [IPv6]:port)"));
  };
  if (text.empty() || text.size() > kMaxDataAddressBytes) return bad("has a bad length");
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 >= text.size()) return bad("has no port");
  absl::string_view host = text.substr(0, colon), port_text = text.substr(colon + 1);
  for (char c : port_text) {
    if (c < '0' || c > '9') return bad("has a bad port");
  }
  uint32_t port = 0;
  if (port_text.size() > 5 || !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return bad("has a bad port");
  }
  DataAddress out;
  const bool v6 = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  std::string h(v6 ? host.substr(1, host.size() - 2) : host);
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&out.addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, h.c_str(), &a->sin6_addr) != 1) return bad("has a bad IPv6 host");
    out.len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&out.addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, h.c_str(), &a->sin_addr) != 1) return bad("has a bad IPv4 host");
    if (a->sin_addr.s_addr == htonl(INADDR_ANY)) return bad("is the wildcard address");
    out.len = sizeof(sockaddr_in);
  }
  return out;
}

std::string FormatDataAddress(const sockaddr* addr) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    return absl::StrCat("[", buf, "]:", ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(addr);
  inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
  return absl::StrCat(buf, ":", ntohs(a->sin_port));
}

}  // namespace gradex::transport::ucx
