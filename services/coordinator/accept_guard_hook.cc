// gradex-coordinator's accept4 (accept_guard.h): the executable's definition
// takes precedence over libc's for gRPC's listener (libgrpc calls accept4
// through the dynamic linker), so gRPC never sees EMFILE.
#include <sys/socket.h>

#include "services/coordinator/accept_guard.h"

extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return gradex::coordinator::GuardedAccept4(fd, addr, len, flags);
}
