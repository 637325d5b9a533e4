// The data-plane hello (transport/ucx/hello.h): only a holder of the job's
// secret gets a worker's address, only a reply signed with it is taken, and
// garbage or a flood of connections leaves the listener serving.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "transport/ucx/hello.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

// Drives `c` until it is done or fails, or 5 s pass.
absl::Status RunHello(transport::ucx::HelloClient& c) {
  const transport::Deadline end = transport::DeadlineIn(milliseconds(5000));
  while (transport::Clock::now() < end) {
    if (absl::Status s = c.Step(); !s.ok()) return s;
    if (c.done()) return absl::OkStatus();
    std::this_thread::sleep_for(milliseconds(1));
  }
  return absl::DeadlineExceededError("hello did not finish in 5 s");
}

transport::ucx::DataAddress At(const transport::ucx::HelloServer& s) {
  return *transport::ucx::ParseDataAddress(s.address());
}

int Connect(const transport::ucx::HelloServer& s) {
  transport::ucx::DataAddress a = At(s);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(UcxHello, AHolderOfTheSecretGetsTheAddress) {
  auto server = transport::ucx::HelloServer::Start("127.0.0.1", std::string(300, 'w'), "job-token");
  ASSERT_TRUE(server.ok()) << server.status();
  transport::ucx::HelloClient c(At(**server), "job-token");
  ASSERT_TRUE(RunHello(c).ok());
  EXPECT_EQ(c.blob(), std::string(300, 'w'));
  EXPECT_EQ((*server)->answered(), 1u);
}

TEST(UcxHello, AnotherSecretGetsNothingAndIsToldWhy) {
  auto server = transport::ucx::HelloServer::Start("127.0.0.1", "address", "job-token");
  ASSERT_TRUE(server.ok()) << server.status();
  transport::ucx::HelloClient c(At(**server), "another-job's-token");
  absl::Status s = RunHello(c);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "another job's token")) << s;
  EXPECT_EQ((*server)->answered(), 0u);
  EXPECT_EQ((*server)->refused(), 1u);
}

// A server that greets, takes any proof and answers with an address whose
// MAC is not the secret's (an impostor on the path): the client refuses it.
TEST(UcxHello, AReplyNotSignedWithTheSecretIsRefused) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  ASSERT_EQ(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  std::thread impostor([lfd] {
    const int fd = accept(lfd, nullptr, nullptr);
    const std::string greeting = std::string("GXH1") + std::string(16, 'n');
    (void)send(fd, greeting.data(), greeting.size(), MSG_NOSIGNAL);
    char proof[52];
    size_t got = 0;
    while (got < sizeof(proof)) {
      const ssize_t n = recv(fd, proof + got, sizeof(proof) - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    const std::string addr = "crafted-ucx-address";
    std::string reply(4, '\0');
    reply[0] = static_cast<char>(addr.size());
    reply += std::string(32, 'm') + addr;
    (void)send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    std::this_thread::sleep_for(milliseconds(200));
    close(fd);
  });
  transport::ucx::DataAddress at;
  std::memcpy(&at.addr, &a, sizeof(a));
  at.len = sizeof(a);
  transport::ucx::HelloClient c(at, "job-token");
  absl::Status s = RunHello(c);
  impostor.join();
  close(lfd);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "not signed with this job's token")) << s;
  EXPECT_TRUE(c.blob().empty());
}

TEST(UcxHello, NothingListeningIsAnErrorAtOnce) {
  // A port that was bound and closed: nothing listens there now.
  std::string address;
  {
    auto server = transport::ucx::HelloServer::Start("127.0.0.1", "address", "k");
    ASSERT_TRUE(server.ok());
    address = (*server)->address();
  }
  transport::ucx::HelloClient c(*transport::ucx::ParseDataAddress(address), "k");
  const auto start = transport::Clock::now();
  absl::Status s = RunHello(c);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_LT(transport::Clock::now() - start, milliseconds(1000));
}

// Random bytes on 500 connections, then silent connections over the cap:
// the listener keeps serving an honest client, which retries past the cap.
TEST(UcxHello, GarbageAndAFullHouseLeaveTheListenerServing) {
  auto server = transport::ucx::HelloServer::Start("127.0.0.1", "address", "k");
  ASSERT_TRUE(server.ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    const int fd = Connect(**server);
    ASSERT_GE(fd, 0);
    std::string bytes(1 + rng() % 4096, '\0');
    for (char& b : bytes) b = static_cast<char>(i % 4 == 0 ? 0 : rng());
    (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    close(fd);
  }
  std::vector<int> silent;
  for (int i = 0; i < transport::ucx::HelloServer::kMaxClients + 10; ++i)
    silent.push_back(Connect(**server));
  std::this_thread::sleep_for(milliseconds(200));
  transport::ucx::HelloClient c(At(**server), "k");
  const auto start = transport::Clock::now();
  ASSERT_TRUE(RunHello(c).ok());
  EXPECT_EQ(c.blob(), "address");
  // The silent ones held the slots until the hello timeout.
  EXPECT_LT(transport::Clock::now() - start,
            transport::ucx::HelloServer::kHelloTimeout + milliseconds(1500));
  EXPECT_GE((*server)->refused(), 500u);
  for (int fd : silent) close(fd);
}

}  // namespace
}  // namespace gradex
