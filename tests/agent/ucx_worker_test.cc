// The agent's UCX worker: communicators one after the other on it (as an
// agent's across epochs), a message the first one left unreceived never
// matched by the second; its wire-up's abandon and the waits it reports; the
// one interface it listens on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "member/data_interface.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex {
namespace {

TEST(UcxWorkerTest, StaleMessagesOfAnEarlierGenerationAreDropped) {
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  std::vector<std::string> addresses(2);
  std::barrier sync(2);
  std::vector<std::string> got(2);
  auto rank = [&](int r) {
    absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
        transport::ucx::CreateUcxWorker(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    addresses[r] = (*worker)->address();
    sync.arrive_and_wait();
    for (uint32_t generation : {1u, 2u}) {
      absl::StatusOr<std::unique_ptr<transport::Transport>> t =
          transport::ucx::ConnectUcxTransport(*worker, r, addresses, generation, options);
      ASSERT_TRUE(t.ok()) << t.status();
      const transport::Deadline deadline = transport::DeadlineIn(std::chrono::milliseconds(10000));
      if (r == 0) {
        std::string text = generation == 1 ? "stale" : "fresh";
        absl::StatusOr<transport::RequestId> id =
            (*t)->PostSend(1, 5, transport::Bytes(text.begin(), text.end()));
        ASSERT_TRUE(id.ok());
        ASSERT_TRUE((*t)->Wait(*id, deadline, nullptr).ok());
      } else if (generation == 2) {
        absl::StatusOr<transport::RequestId> id = (*t)->PostRecv(0, 5);
        ASSERT_TRUE(id.ok());
        transport::Bytes in;
        ASSERT_TRUE((*t)->Wait(*id, deadline, &in).ok());
        got[r].assign(in.begin(), in.end());
      }
      // Generation 1's message is delivered to rank 1's worker before both
      // move on, and nobody receives it.
      std::this_thread::sleep_for(std::chrono::milliseconds(generation == 1 ? 200 : 0));
      sync.arrive_and_wait();
      t->reset();
      sync.arrive_and_wait();
    }
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
  EXPECT_EQ(got[1], "fresh");
}

// A member still entering an earlier epoch can already hold a later epoch's
// wire-up byte from a peer that went straight to the later one (a
// replacement's, to a parameter server that enters the eviction's epoch
// first): entering the earlier one must not drop it.
TEST(UcxWorkerTest, AMessageOfALaterGenerationSurvivesAnEarlierOnesConnect) {
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  options.connect_timeout = std::chrono::milliseconds(5000);
  std::vector<std::string> addresses(2);
  std::barrier sync(2);
  absl::Status late_wire_up[2];
  auto rank = [&](int r) {
    absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
        transport::ucx::CreateUcxWorker(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    addresses[r] = (*worker)->address();
    sync.arrive_and_wait();
    {
      absl::StatusOr<std::unique_ptr<transport::Transport>> t =
          transport::ucx::ConnectUcxTransport(*worker, r, addresses, 1, options);
      ASSERT_TRUE(t.ok()) << t.status();
      sync.arrive_and_wait();
      if (r == 1) {
        // Drives the worker while rank 0 connects generation 3 and sends its
        // wire-up byte, which lands in this worker's unexpected queue.
        absl::StatusOr<transport::RequestId> id = (*t)->PostRecv(0, 9);
        ASSERT_TRUE(id.ok());
        EXPECT_FALSE(
            (*t)->Wait(*id, transport::DeadlineIn(std::chrono::milliseconds(500)), nullptr).ok());
      }
    }
    if (r == 1) {
      // Generation 2, with this rank alone, is entered before 3.
      absl::StatusOr<std::unique_ptr<transport::Transport>> alone =
          transport::ucx::ConnectUcxTransport(*worker, 0, {addresses[1]}, 2, options);
      ASSERT_TRUE(alone.ok()) << alone.status();
    }
    absl::StatusOr<std::unique_ptr<transport::Transport>> t =
        transport::ucx::ConnectUcxTransport(*worker, r, addresses, 3, options);
    late_wire_up[r] = t.status();
    sync.arrive_and_wait();  // nobody leaves before both wire-ups ended
  };
  std::thread a(rank, 0), b(rank, 1);
  a.join();
  b.join();
  EXPECT_TRUE(late_wire_up[0].ok()) << late_wire_up[0];
  EXPECT_TRUE(late_wire_up[1].ok()) << late_wire_up[1];
}

TEST(UcxWorkerTest, OneCommunicatorAtATime) {
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
      transport::ucx::CreateUcxWorker(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::vector<std::string> one = {(*worker)->address()};
  absl::StatusOr<std::unique_ptr<transport::Transport>> t =
      transport::ucx::ConnectUcxTransport(*worker, 0, one, 1, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(transport::ucx::ConnectUcxTransport(*worker, 0, one, 2, options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  t->reset();
  EXPECT_TRUE(transport::ucx::ConnectUcxTransport(*worker, 0, one, 2, options).ok());
  std::vector<std::string> two = {(*worker)->address(), ""};
  EXPECT_EQ(transport::ucx::ConnectUcxTransport(*worker, 0, two, 3, options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A member that never joins the data plane: a loopback listener that
// accepts TCP (the kernel completes the handshake) and never answers.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
        listen(fd_, 8) == 0 && getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    }
  }
  ~SilentPeer() { Close(); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Empty when the listener could not be made.
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

// A peer whose listener accepts TCP and never answers (a member that never
// joins the data plane) holds the wire-up until its deadline, unless the
// agent abandons it: a newer epoch superseded this one (an eviction at the
// entry deadline, or losses settled into one epoch change). The connect then ends ABORTED at once
// and the worker is free.
TEST(UcxWorkerTest, AWireUpIsAbandonedWhenTheEpochIsSuperseded) {
  SilentPeer hole;
  ASSERT_FALSE(hole.address().empty());
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  options.connect_timeout = std::chrono::seconds(20);
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
      transport::ucx::CreateUcxWorker(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::vector<std::string> addresses = {(*worker)->address(), hole.address()};
  const auto start = std::chrono::steady_clock::now();
  options.abandon = [start] {
    return std::chrono::steady_clock::now() - start > std::chrono::milliseconds(300);
  };
  absl::StatusOr<std::unique_ptr<transport::Transport>> t =
      transport::ucx::ConnectUcxTransport(*worker, 0, addresses, 1, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(t.status().code(), absl::StatusCode::kAborted) << t.status();
  EXPECT_LT(seconds, 5.0) << "the wire-up ran on past its abandon";
  options.abandon = nullptr;
  EXPECT_TRUE(
      transport::ucx::ConnectUcxTransport(*worker, 0, {(*worker)->address()}, 2, options).ok());
}

// The wire-up tells which peers it waits on (UcxOptions::on_wire_up_wait):
// every peer as it starts, a peer that answers as soon as it did, and the
// rest as it ends. Ranks 0 and 1 are real; rank 2 accepts TCP and never
// answers (a member that stalls its entry): both real ranks stop waiting on
// each other at once and wait on rank 2 until the quiet timeout after that
// answer (UcxOptions::wire_up_quiet, 2.5 s; the deadline is 20 s), which
// names it.
TEST(UcxWorkerTest, AWireUpTellsWhichPeersItStillWaitsOn) {
  SilentPeer hole;
  ASSERT_FALSE(hole.address().empty());
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  options.connect_timeout = std::chrono::seconds(20);
  options.wire_up_quiet = std::chrono::milliseconds(2500);
  std::vector<std::string> addresses(3, hole.address());
  struct Event {
    int peer;
    bool waiting;
    double at;  // seconds since the connect started
  };
  std::vector<std::vector<Event>> events(2);
  std::vector<absl::Status> status(2);
  std::barrier sync(2);
  auto rank = [&](int r) {
    absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
        transport::ucx::CreateUcxWorker(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    addresses[r] = (*worker)->address();
    sync.arrive_and_wait();
    transport::ucx::UcxOptions o = options;
    const auto start = std::chrono::steady_clock::now();
    o.on_wire_up_wait = [&, r, start](int peer, bool waiting) {
      events[r].push_back(
          {peer, waiting,
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    };
    status[r] = transport::ucx::ConnectUcxTransport(*worker, r, addresses, 1, o).status();
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  hole.Close();
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(status[r].code(), absl::StatusCode::kDeadlineExceeded) << status[r];
    EXPECT_NE(status[r].message().find("timed out waiting for peer 2"), std::string::npos)
        << status[r];
    ASSERT_EQ(events[r].size(), 4u);
    const int other = 1 - r;
    // Both waits start together, the real peer's in rank order.
    EXPECT_TRUE(events[r][0].waiting && events[r][1].waiting);
    EXPECT_EQ(events[r][0].peer, r == 0 ? 1 : 0);
    EXPECT_EQ(events[r][1].peer, 2);
    // The real peer answers long before the deadline; rank 2 never does.
    EXPECT_EQ(events[r][2].peer, other);
    EXPECT_FALSE(events[r][2].waiting);
    EXPECT_LT(events[r][2].at, 2.0);
    EXPECT_EQ(events[r][3].peer, 2);
    EXPECT_FALSE(events[r][3].waiting);
    EXPECT_GE(events[r][3].at, events[r][2].at + 2.4);
    EXPECT_LT(events[r][3].at, 10.0);
  }
}

// The TCP sockets listening on `port` (/proc/net/tcp, IPv4): their local
// addresses as the kernel prints them ("0100007F" is 127.0.0.1).
std::vector<std::string> ListenersOn(int port) {
  std::ifstream in("/proc/net/tcp");
  std::vector<std::string> out;
  std::string line;
  std::getline(in, line);  // the header
  char want[8];
  std::snprintf(want, sizeof(want), "%04X", port);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string slot, local, remote, state;
    f >> slot >> local >> remote >> state;
    const size_t colon = local.find(':');
    if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == want) {
      out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

// The data plane listens on one interface: the chosen
// IP, never the wildcard; an agent of a loopback job picks loopback (the
// route to its coordinator), and a wildcard --data-ip is refused.
TEST(UcxWorkerTest, TheDataPlaneListensOnTheChosenInterfaceOnly) {
  absl::StatusOr<std::string> ip = member::DataPlaneIp("", "127.0.0.1:50051");
  ASSERT_TRUE(ip.ok()) << ip.status();
  EXPECT_EQ(*ip, "127.0.0.1");
  EXPECT_EQ(*member::DataPlaneIp("10.1.2.3", "127.0.0.1:50051"), "10.1.2.3");
  transport::ucx::UcxOptions options;
  options.tls = "tcp";
  options.listen_ip = *ip;
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> worker =
      transport::ucx::CreateUcxWorker(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string& address = (*worker)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  const int port = std::stoi(address.substr(address.find(':') + 1));
  EXPECT_EQ(ListenersOn(port), (std::vector<std::string>{"0100007F"}));
  options.listen_ip = "0.0.0.0";
  absl::StatusOr<std::shared_ptr<transport::ucx::UcxWorker>> wildcard =
      transport::ucx::CreateUcxWorker(options);
  EXPECT_EQ(wildcard.status().code(), absl::StatusCode::kInvalidArgument) << wildcard.status();
}

}  // namespace
}  // namespace gradex
