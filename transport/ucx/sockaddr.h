// The data plane's addresses: "IPv4:port" or "[IPv6]:port" of a worker's
// hello listener (hello.h), parsed by us. A peer's address comes from
// another member (through the coordinator's plan); publishing raw packed UCX
// bytes there let one member's 64 bytes of 0x07 abort every other agent
// inside ucp_address_unpack. A sockaddr is checked here in full, and a peer
// that does not answer at it is a connection error naming that peer.
#ifndef GRADEX_TRANSPORT_UCX_SOCKADDR_H_
#define GRADEX_TRANSPORT_UCX_SOCKADDR_H_

#include <sys/socket.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradex::transport::ucx {

inline constexpr size_t kMaxDataAddressBytes = 64;

struct DataAddress {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

// INVALID_ARGUMENT unless `text` is exactly an IPv4 "a.b.c.d:port" or an
// IPv6 "[x::y]:port" with port 1..65535 (no names: nothing to resolve).
absl::StatusOr<DataAddress> ParseDataAddress(absl::string_view text);
// The text form of a bound socket address.
std::string FormatDataAddress(const sockaddr* addr);

}  // namespace gradex::transport::ucx

#endif  // GRADEX_TRANSPORT_UCX_SOCKADDR_H_
