// Large receives over UCX land in the buffer the caller gets: posted with a
// kept buffer before the message comes (no probe, no bounce through UCX's
// unexpected queue, no fresh zeroed allocation), in order, and still capped.
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/transport/test_util.h"
#include "tests/transport/ucx_world.h"
#include "transport/buffer_pool.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::testing {
namespace {

using std::chrono::milliseconds;

constexpr size_t kBig = size_t{1} << 20;
constexpr uint64_t kTag = 9;

// Sends Pattern(t.rank(), to, index, bytes) on `tag` and waits for it.
absl::Status SendPattern(transport::Transport& t, int to, uint64_t tag, int index, size_t bytes,
                         transport::Deadline d) {
  absl::StatusOr<transport::RequestId> s = t.PostSend(to, tag, Pattern(t.rank(), to, index, bytes));
  if (!s.ok()) return s.status();
  return t.Wait(*s, d, nullptr);
}

// Both ranks exchange `rounds` messages of kBig bytes, as a ring step does,
// and check every byte; returns the rank's receive profile through `out`.
absl::Status Exchanges(transport::Transport& t, int rounds, transport::RecvProfile* out) {
  const int other = 1 - t.rank();
  const transport::Deadline d = transport::DeadlineIn(milliseconds(10000));
  for (int i = 0; i < rounds; ++i) {
    absl::StatusOr<transport::Bytes> in = transport::SendRecv(
        t, other, kTag, Pattern(t.rank(), other, i, kBig), other, kTag, d, kBig);
    if (!in.ok()) return in.status();
    if (std::string bad = CheckPattern(*in, other, t.rank(), i, kBig); !bad.empty()) {
      return absl::DataLossError(absl::StrCat("round ", i, ": ", bad));
    }
  }
  *out = t.recv_profile();
  return absl::OkStatus();
}

// The counts below assume each receive is posted before or while its message
// arrives; the early-message drain (UcxOptions::unexpected_*_per_peer) would
// take a message that came first (a loaded machine: the peer a round ahead)
// and hand it to the receive as a probed one, so it is off here.
transport::ucx::UcxOptions NoDrain(const char* tls) {
  transport::ucx::UcxOptions opt;
  opt.tls = tls;
  opt.unexpected_bytes_per_peer = 0;
  opt.unexpected_messages_per_peer = 0;
  return opt;
}

TEST(UcxDirectReceiveTest, LargeReceivesAfterTheFirstLandInAKeptBufferWithNoProbe) {
  for (const char* tls : {"tcp", "posix"}) {
    SCOPED_TRACE(tls);
    transport::ucx::UcxOptions opt = NoDrain(tls);
    transport::RecvProfile prof[2];
    std::vector<absl::Status> st = RunUcxWorld(
        2, opt, [&](transport::Transport& t) { return Exchanges(t, 6, &prof[t.rank()]); });
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      EXPECT_EQ(prof[r].receives, 6u);
      // The first receive has no kept buffer yet (nothing was sent); every
      // later one reuses the buffer of the send before it.
      EXPECT_EQ(prof[r].posted_direct, 5u) << "rank " << r;
      EXPECT_EQ(prof[r].pooled, 5u) << "rank " << r;
    }
  }
}

TEST(UcxDirectReceiveTest, WithoutThePoolEveryReceiveIsProbed) {
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.buffer_pool_bytes = 0;
  transport::RecvProfile prof[2];
  std::vector<absl::Status> st = RunUcxWorld(
      2, opt, [&](transport::Transport& t) { return Exchanges(t, 3, &prof[t.rank()]); });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r];
    EXPECT_EQ(prof[r].posted_direct, 0u);
    EXPECT_EQ(prof[r].pooled, 0u);
  }
}

// A probed receive queued first keeps its place: the capped receive posted
// after it on the same tag must not take the first message.
TEST(UcxDirectReceiveTest, ADirectReceiveNeverOvertakesAQueuedProbe) {
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  std::vector<absl::Status> st = RunUcxWorld(2, opt, [&](transport::Transport& t) -> absl::Status {
    transport::RecvProfile unused;
    if (absl::Status s = Exchanges(t, 1, &unused); !s.ok()) return s;  // fills the pool
    const transport::Deadline d = transport::DeadlineIn(milliseconds(10000));
    if (t.rank() == 1) {
      for (int i = 10; i < 12; ++i) {
        if (absl::Status s = SendPattern(t, 0, kTag + 1, i, kBig, d); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    auto first = t.PostRecv(1, kTag + 1);  // unbounded: probed
    if (!first.ok()) return first.status();
    auto second = t.PostRecvAtMost(1, kTag + 1, kBig);
    if (!second.ok()) return second.status();
    transport::Bytes a, b;
    if (absl::Status s = t.Wait(*second, d, &b); !s.ok()) return s;
    if (absl::Status s = t.Wait(*first, d, &a); !s.ok()) return s;
    std::string bad = CheckPattern(a, 1, 0, 10, kBig) + CheckPattern(b, 1, 0, 11, kBig);
    return bad.empty() ? absl::OkStatus() : absl::DataLossError(bad);
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

// A message already queued when the direct receive is posted completes it
// at once (UCX's immediate completion): the receive still ends, with the
// message's own length, not the buffer's. Without the early-message drain
// (UcxOptions::unexpected_*_per_peer 0), which otherwise takes the message off
// UCX's queue before the receive comes, and hands it to the receive as a
// probed one (HostileTagFlood.EarlyMessagesUnderTheCapAreDeliveredInOrder): a
// message can still land between the last drain and the post.
TEST(UcxDirectReceiveTest, AMessageAlreadyHereCompletesADirectReceive) {
  for (const char* tls : {"tcp", "posix"}) {
    SCOPED_TRACE(tls);
    transport::ucx::UcxOptions opt = NoDrain(tls);
    std::vector<absl::Status> st =
        RunUcxWorld(2, opt, [&](transport::Transport& t) -> absl::Status {
          transport::RecvProfile unused;
          if (absl::Status s = Exchanges(t, 1, &unused); !s.ok()) return s;  // fills the pool
          const transport::Deadline d = transport::DeadlineIn(milliseconds(10000));
          const size_t eager = 1000;  // one eager fragment: UCX completes it at once
          if (t.rank() == 1) {
            for (auto [tag, n] : {std::pair<uint64_t, size_t>{kTag + 3, eager}, {kTag + 4, 8}}) {
              if (absl::Status s = SendPattern(t, 0, tag, 30, n, d); !s.ok()) return s;
            }
            return absl::OkStatus();
          }
          // The second message's arrival drives progress; the first came before it.
          transport::Bytes in;
          auto marker = t.PostRecv(1, kTag + 4);
          if (!marker.ok()) return marker.status();
          if (absl::Status s = t.Wait(*marker, d, &in); !s.ok()) return s;
          const uint64_t direct_before = t.recv_profile().posted_direct;
          auto late = t.PostRecvAtMost(1, kTag + 3, kBig / 2);
          if (!late.ok()) return late.status();
          if (t.recv_profile().posted_direct != direct_before + 1) {
            return absl::InternalError("not posted direct");
          }
          if (absl::Status s = t.Wait(*late, d, &in); !s.ok()) return s;
          std::string bad = CheckPattern(in, 1, 0, 30, eager);
          return bad.empty() ? absl::OkStatus() : absl::DataLossError(bad);
        });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  }
}

// A direct receive is posted at its cap: a longer message is refused naming
// its size, nothing past the cap is allocated, and the link stays usable.
TEST(UcxDirectReceiveTest, ADirectReceiveOverItsCapIsRefusedAndTheLinkGoesOn) {
  for (const char* tls : {"tcp", "posix"}) {
    SCOPED_TRACE(tls);
    transport::ucx::UcxOptions opt = NoDrain(tls);
    std::vector<absl::Status> st =
        RunUcxWorld(2, opt, [&](transport::Transport& t) -> absl::Status {
          transport::RecvProfile unused;
          if (absl::Status s = Exchanges(t, 1, &unused); !s.ok()) return s;
          const transport::Deadline d = transport::DeadlineIn(milliseconds(10000));
          if (t.rank() == 1) {
            for (size_t n : {kBig, kBig / 4}) {
              if (absl::Status s = SendPattern(t, 0, kTag + 2, 20, n, d); !s.ok()) return s;
            }
            return absl::OkStatus();
          }
          const size_t cap = kBig / 2;
          auto over = t.PostRecvAtMost(1, kTag + 2, cap);
          if (!over.ok()) return over.status();
          if (t.recv_profile().receives != 1) return absl::InternalError("profile miscounted");
          transport::Bytes in;
          absl::Status w = t.Wait(*over, d, &in);
          if (!absl::IsResourceExhausted(w) || !absl::StrContains(w.message(), "peer 1 sent") ||
              !absl::StrContains(w.message(), absl::StrCat(cap))) {
            return absl::InternalError(absl::StrCat("want RESOURCE_EXHAUSTED: ", w.ToString()));
          }
          if (t.counters(1).refused_messages != 1)
            return absl::InternalError("refusal not counted");
          auto next = t.PostRecvAtMost(1, kTag + 2, cap);
          if (!next.ok()) return next.status();
          if (absl::Status s = t.Wait(*next, d, &in); !s.ok()) return s;
          std::string bad = CheckPattern(in, 1, 0, 20, kBig / 4);
          if (!bad.empty()) return absl::DataLossError(bad);
          // The refused receive was the direct one (the kept buffer went with it,
          // so the next was probed).
          return t.recv_profile().posted_direct == 1 ? absl::OkStatus()
                                                     : absl::InternalError("not posted direct");
        });
    for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(BufferPoolTest, ReusesTheSmallestThatFitsWithinItsBounds) {
  transport::BufferPool pool(/*min_bytes=*/100, /*max_buffers=*/2, /*max_bytes=*/1000);
  EXPECT_FALSE(pool.Has(100));
  pool.Give(transport::Bytes(50));  // too small to keep
  EXPECT_EQ(pool.buffers(), 0u);
  pool.Give(transport::Bytes(2000));  // over the byte bound
  EXPECT_EQ(pool.buffers(), 0u);
  pool.Give(transport::Bytes(300, 7));
  pool.Give(transport::Bytes(600, 8));
  EXPECT_EQ(pool.bytes(), 900u);
  EXPECT_FALSE(pool.Has(99));  // below min_bytes: a fresh one is cheap
  transport::Bytes b = pool.Take(250);
  EXPECT_EQ(b.size(), 250u);
  EXPECT_EQ(b[0], 7);  // the 300 one, not the 600 one
  EXPECT_EQ(pool.reused(), 1u);
  pool.Give(transport::Bytes(400));  // evicts nothing larger; 600 + 400 fits
  EXPECT_EQ(pool.buffers(), 2u);
  pool.Give(transport::Bytes(500));  // would need the 600 gone too: not kept, nothing dropped
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.bytes(), 1000u);
  pool.Give(transport::Bytes(350));  // count bound: a smaller one is not worth a larger
  EXPECT_EQ(pool.bytes(), 1000u);
  transport::BufferPool three(100, 3, 1000);
  three.Give(transport::Bytes(200));
  three.Give(transport::Bytes(300));
  three.Give(transport::Bytes(700));  // drops the 200 only: 300 + 700 fits
  EXPECT_EQ(three.buffers(), 2u);
  EXPECT_EQ(three.bytes(), 1000u);
  EXPECT_TRUE(three.Has(700));
  EXPECT_EQ(three.Take(201).capacity(), 300u);
  EXPECT_FALSE(three.Has(701));
}

}  // namespace
}  // namespace gradex::testing
