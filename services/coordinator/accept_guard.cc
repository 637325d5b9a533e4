#include "services/coordinator/accept_guard.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>

namespace gradex::coordinator {
namespace {

std::atomic<uint64_t> g_over_cap{0};
std::atomic<uint64_t> g_exhausted{0};
std::mutex g_spare_mu;
int g_spare = -1;  // a descriptor kept to take a pending connection on EMFILE

int RawAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(syscall(SYS_accept4, fd, addr, len, flags));
}

void KeepSpare() {
  std::lock_guard<std::mutex> lock(g_spare_mu);
  if (g_spare < 0) g_spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

// On EMFILE: frees the spare, takes one pending connection with it and
// closes it (its peer sees the close instead of waiting in the backlog).
// False when there was no spare or nothing pending.
bool DropOnePending(int fd) {
  std::lock_guard<std::mutex> lock(g_spare_mu);
  if (g_spare < 0) return false;
  close(g_spare);
  g_spare = -1;
  const int c = RawAccept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (c >= 0) close(c);
  g_spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return c >= 0;
}

}  // namespace

int64_t AcceptCap(uint64_t limit) {
  const uint64_t reserve = std::max<uint64_t>(64, limit / 16);
  return limit > reserve ? static_cast<int64_t>(limit - reserve) - 1 : 0;
}

AcceptGuardCounts AcceptGuardTotals() { return {g_over_cap.load(), g_exhausted.load()}; }

int GuardedAccept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  KeepSpare();
  const socklen_t len_in = len != nullptr ? *len : 0;
  for (;;) {
    if (len != nullptr) *len = len_in;
    const int c = RawAccept4(fd, addr, len, flags);
    if (c >= 0) {
      // Read each time: the limit can change while the process runs.
      rlimit lim = {};
      const int64_t cap = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                              ? AcceptCap(lim.rlim_cur)
                              : INT64_MAX;
      if (c <= cap) return c;
      close(c);  // descriptors are the lowest free: c over the cap means the cap is reached
      g_over_cap.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (errno == EMFILE || errno == ENFILE) {
      g_exhausted.fetch_add(1, std::memory_order_relaxed);
      if (DropOnePending(fd)) continue;
      errno = EAGAIN;  // gRPC re-arms the listener instead of giving it up
      return -1;
    }
    return -1;
  }
}

}  // namespace gradex::coordinator
