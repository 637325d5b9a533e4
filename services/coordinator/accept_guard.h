// The coordinator's listener under descriptor exhaustion. gRPC 1.51's TCP
// listener (tcp_server_posix.cc) treats any accept4 error but EAGAIN,
// EINTR and ECONNABORTED as fatal to the listening port: after one EMFILE it
// never accepts again, and a coordinator whose fds an outsider filled with
// idle connections turns every later joiner away for good. The guard keeps
// gRPC from ever seeing that error:
//  - a cap below the descriptor limit: a connection whose descriptor would
//    leave fewer than a reserve free (max(64, limit / 16)) is closed at once
//    (the peer retries with its backoff), so files, the metrics server and
//    gRPC's own descriptors always have room;
//  - if EMFILE / ENFILE happen anyway (other descriptors), the pending
//    connection is taken with a spare descriptor kept for that and closed,
//    and gRPC is told EAGAIN: the listener stays armed and accepts again as
//    soon as descriptors free.
// gradex-coordinator links accept_guard_hook.cc, which puts GuardedAccept4 in
// front of libc's accept4 for gRPC (symbol interposition); processes that
// embed the coordinator library elsewhere keep libc's accept4.
#ifndef GRADEX_SERVICES_COORDINATOR_ACCEPT_GUARD_H_
#define GRADEX_SERVICES_COORDINATOR_ACCEPT_GUARD_H_

#include <sys/socket.h>

#include <cstdint>

namespace gradex::coordinator {

// The highest descriptor number a new connection may take under a
// descriptor limit of `limit` (pure): limit - max(64, limit / 16) - 1, at
// least 0 (a limit at or under the reserve keeps nothing for connections).
int64_t AcceptCap(uint64_t limit);

// What the guard did since the process started.
struct AcceptGuardCounts {
  uint64_t over_cap = 0;   // connections closed at once: over the cap
  uint64_t exhausted = 0;  // connections dropped on EMFILE / ENFILE
};
AcceptGuardCounts AcceptGuardTotals();

// accept4 with the guard (the listening socket must be non-blocking, as
// gRPC's is): never fails with EMFILE / ENFILE, never returns a descriptor
// over the cap.
int GuardedAccept4(int fd, sockaddr* addr, socklen_t* len, int flags);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_ACCEPT_GUARD_H_
