// The listener's guard (accept_guard.h) on a real loopback socket with the
// process's descriptor limit lowered: connections past the cap are closed
// at once and counted, and on EMFILE the pending connections are dropped
// and the caller told EAGAIN (gRPC's listener stays armed), never EMFILE.
#include "services/coordinator/accept_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace gradex::coordinator {
namespace {

TEST(AcceptGuard, TheCapLeavesAReserveBelowTheLimit) {
  EXPECT_EQ(AcceptCap(1024), 1024 - 64 - 1);
  EXPECT_EQ(AcceptCap(65536), 65536 - 4096 - 1);
  EXPECT_EQ(AcceptCap(64), 0);
  EXPECT_EQ(AcceptCap(10), 0);
}

class LoweredLimit {
 public:
  LoweredLimit() { getrlimit(RLIMIT_NOFILE, &saved_); }
  ~LoweredLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }
  void Set(rlim_t soft) {
    rlimit l = saved_;
    l.rlim_cur = soft;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &l), 0);
  }

 private:
  rlimit saved_;
};

int Listen(sockaddr_in* a) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(*a);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(a), sizeof(*a)), 0);
  EXPECT_EQ(listen(fd, 64), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(a), &len), 0);
  return fd;
}

std::vector<int> Connect(const sockaddr_in& a, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)), 0);
    fds.push_back(fd);
  }
  return fds;
}

// The highest descriptor now open (descriptors are the lowest free: a new
// one's number, minus one).
int HighestOpen() {
  const int probe = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(probe);
  return probe - 1;
}

bool ClosedByPeer(int fd) {
  char b;
  const ssize_t got = recv(fd, &b, 1, MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

TEST(AcceptGuard, ConnectionsPastTheCapAreClosedAtOnceAndEmfileIsNeverSeen) {
  sockaddr_in a = {};
  const int lfd = Listen(&a);
  // The first call keeps its spare descriptor (taken before the count).
  ASSERT_EQ(GuardedAccept4(lfd, nullptr, nullptr, SOCK_CLOEXEC), -1);
  EXPECT_EQ(errno, EAGAIN);
  std::vector<int> clients = Connect(a, 10);
  const AcceptGuardCounts before = AcceptGuardTotals();
  LoweredLimit limit;
  const int high = HighestOpen();
  limit.Set(static_cast<rlim_t>(high) + 1 + 64 + 3);  // room for 3 under the cap
  std::vector<int> accepted;
  for (;;) {
    const int c = GuardedAccept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      EXPECT_EQ(errno, EAGAIN);
      break;
    }
    accepted.push_back(c);
  }
  ASSERT_EQ(accepted.size(), 3u);
  for (int c : accepted) EXPECT_LE(c, AcceptCap(static_cast<uint64_t>(high) + 68));
  EXPECT_EQ(AcceptGuardTotals().over_cap - before.over_cap, 7u);
  int closed = 0;
  for (int fd : clients) closed += ClosedByPeer(fd);
  EXPECT_EQ(closed, 7);

  // No descriptor left at all: the pending connections are dropped with the
  // spare and the caller sees EAGAIN, not EMFILE.
  std::vector<int> more = Connect(a, 5);
  limit.Set(static_cast<rlim_t>(HighestOpen()) + 1);
  EXPECT_EQ(GuardedAccept4(lfd, nullptr, nullptr, SOCK_CLOEXEC), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_GE(AcceptGuardTotals().exhausted - before.exhausted, 5u);
  for (int fd : more) EXPECT_TRUE(ClosedByPeer(fd));
  for (int fd : more) close(fd);
  for (int fd : clients) close(fd);
  for (int fd : accepted) close(fd);
  close(lfd);
}

}  // namespace
}  // namespace gradex::coordinator
