// UCX-specific behaviour the conformance suite cannot express: connection
// failures, configuration errors and bounded teardown.
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/transport/test_util.h"
#include "tests/transport/ucx_world.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::testing {
namespace {

using std::chrono::milliseconds;

class FixedBootstrap : public transport::Bootstrap {
 public:
  explicit FixedBootstrap(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string&,
                                                     transport::Deadline) override {
    return absl::InternalError("must not be reached");
  }

 private:
  int size_;
};

TEST(UcxTransportTest, TooManyRanksRejected) {
  FixedBootstrap boot(1 << 16);
  auto t = transport::ucx::CreateUcxTransport(boot, transport::ucx::UcxOptions{});
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
}

TEST(UcxTransportTest, MissingPeerFailsWithinConnectTimeout) {
  auto exchange = std::make_shared<InProcessExchange>(2);
  InProcessBootstrap boot(exchange, 0);  // rank 1 never shows up
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.connect_timeout = milliseconds(300);
  auto start = transport::Clock::now();
  auto t = transport::ucx::CreateUcxTransport(boot, opt);
  EXPECT_FALSE(t.ok());
  EXPECT_LT(transport::Clock::now() - start, milliseconds(2000));
}

TEST(UcxTransportTest, UnknownTlsIsAnError) {
  auto exchange = std::make_shared<InProcessExchange>(1);
  InProcessBootstrap boot(exchange, 0);
  transport::ucx::UcxOptions opt;
  opt.tls = "no-such-transport";
  auto t = transport::ucx::CreateUcxTransport(boot, opt);
  EXPECT_FALSE(t.ok());
}

// A peer that stops participating after wire-up: the waiter gets
// DEADLINE_EXCEEDED on time, and destroying a transport with a posted
// receive and a rendezvous send nobody takes returns within its budget.
TEST(UcxTransportTest, TeardownWithPendingRequestsIsBounded) {
  for (const char* tls : {"tcp", "posix"}) {
    SCOPED_TRACE(tls);
    transport::ucx::UcxOptions opt;
    opt.tls = tls;
    opt.close_timeout = milliseconds(500);
    const auto start = transport::Clock::now();
    std::vector<absl::Status> st =
        RunUcxWorld(2, opt, [&](transport::Transport& t) -> absl::Status {
          const int other = 1 - t.rank();
          auto r = t.PostRecv(other, 5);
          if (!r.ok()) return r.status();
          auto s = t.PostSend(other, 6, transport::Bytes(8u << 20, 3));  // never received
          if (!s.ok()) return s.status();
          absl::Status w = t.Wait(*s, transport::DeadlineIn(milliseconds(200)), nullptr);
          if (!absl::IsDeadlineExceeded(w)) {
            return absl::InternalError(absl::StrCat("want DEADLINE_EXCEEDED: ", w.ToString()));
          }
          if (!absl::StrContains(w.message(), "send to peer")) {
            return absl::InternalError(w.ToString());
          }
          return absl::OkStatus();
        });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
    // Connect + 200 ms wait + teardown (close_timeout) with generous slack.
    EXPECT_LT(transport::Clock::now() - start, milliseconds(3000));
  }
}

// Destroying one rank while its peer is mid-wait: the peer sees an error
// (not a hang) and its own teardown is bounded too.
TEST(UcxTransportTest, PeerDestroyedMidWaitTcp) {
  auto exchange = std::make_shared<InProcessExchange>(2);
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  absl::Status waiter_status;
  transport::Clock::duration waited{};
  std::thread t1([&] {
    InProcessBootstrap boot(exchange, 1);
    auto t = transport::ucx::CreateUcxTransport(boot, opt);
    ASSERT_TRUE(t.ok()) << t.status();
    std::this_thread::sleep_for(milliseconds(100));
    t->reset();  // goes away without sending anything
  });
  {
    InProcessBootstrap boot(exchange, 0);
    auto t = transport::ucx::CreateUcxTransport(boot, opt);
    ASSERT_TRUE(t.ok()) << t.status();
    auto r = (*t)->PostRecv(1, 9);
    ASSERT_TRUE(r.ok());
    auto start = transport::Clock::now();
    waiter_status = (*t)->Wait(*r, transport::DeadlineIn(milliseconds(8000)), nullptr);
    waited = transport::Clock::now() - start;
  }
  t1.join();
  EXPECT_FALSE(waiter_status.ok());
  EXPECT_TRUE(absl::IsUnavailable(waiter_status)) << waiter_status;
  EXPECT_LT(waited, milliseconds(5000));
}

// A peer's announced length is not allocated past the
// receive cap; the receive fails naming the size and the link stays usable.
TEST(UcxTransportTest, ReceivesOverTheCapAreRefused) {
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.max_message_bytes = 4096;
  std::vector<absl::Status> st = RunUcxWorld(2, opt, [&](transport::Transport& t) -> absl::Status {
    const transport::Deadline d = transport::DeadlineIn(milliseconds(5000));
    if (t.rank() == 1) {
      for (size_t n : {size_t{1} << 20, size_t{100}}) {
        auto s = t.PostSend(0, 7, transport::Bytes(n, 1));
        if (!s.ok()) return s.status();
        if (absl::Status w = t.Wait(*s, d, nullptr); !w.ok()) return w;
      }
      return absl::OkStatus();
    }
    auto big = t.PostRecv(1, 7);
    if (!big.ok()) return big.status();
    transport::Bytes in;
    absl::Status w = t.Wait(*big, d, &in);
    if (!absl::IsResourceExhausted(w) || !absl::StrContains(w.message(), "1048576 bytes")) {
      return absl::InternalError(absl::StrCat("want RESOURCE_EXHAUSTED: ", w.ToString()));
    }
    auto small = t.PostRecv(1, 7);
    if (!small.ok()) return small.status();
    if (absl::Status s = t.Wait(*small, d, &in); !s.ok()) return s;
    return in.size() == 100 ? absl::OkStatus() : absl::InternalError("short message");
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace gradex::testing
