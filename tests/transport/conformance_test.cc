// One conformance suite run against every Transport (loopback, the simulator,
// UCX over several transport sets) for world sizes 1..5, and against loopback
// behind ForwardingTransport (the decorators' base must be invisible). The
// fixture is in conformance.h.
#include "tests/transport/conformance.h"

#include <vector>

namespace gradex::testing {
namespace {

TEST_P(TransportConformance, RankAndSize) {
  Run([&](transport::Transport& t) -> absl::Status {
    if (t.size() != P() || t.rank() < 0 || t.rank() >= P()) {
      return absl::InternalError(absl::StrCat("rank ", t.rank(), " size ", t.size()));
    }
    return absl::OkStatus();
  });
}

TEST_P(TransportConformance, SelfSend) {
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank();
    absl::StatusOr<transport::Bytes> got = transport::SendRecv(
        t, me, 5, Pattern(me, me, 0, 100), me, 5, transport::DeadlineIn(kStepTimeout));
    if (!got.ok()) return got.status();
    return Check(CheckPattern(*got, me, me, 0, 100));
  });
}

TEST_P(TransportConformance, Ring) {
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    for (int step = 0; step < 3; ++step) {
      absl::StatusOr<transport::Bytes> got =
          transport::SendRecv(t, next, step, Pattern(me, next, step, 1000 + step), prev, step,
                              transport::DeadlineIn(kStepTimeout));
      if (!got.ok()) return got.status();
      if (auto s = Check(CheckPattern(*got, prev, me, step, 1000 + step)); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

// Every rank sends a differently sized message to every rank (itself too);
// receives are of unknown size. Also checks the counters exactly.
TEST_P(TransportConformance, AllToAllAndCounters) {
  auto len = [](int src, int dst) -> size_t { return 1 + 1000 * src + 37 * dst; };
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank();
    transport::Deadline d = transport::DeadlineIn(kStepTimeout);
    std::vector<transport::RequestId> recvs, sends;
    for (int p = 0; p < P(); ++p) {
      auto r = t.PostRecv(p, 42);
      if (!r.ok()) return r.status();
      recvs.push_back(*r);
    }
    for (int p = 0; p < P(); ++p) {
      auto s = t.PostSend(p, 42, Pattern(me, p, 0, len(me, p)));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    std::vector<transport::Bytes> got;
    if (auto s = WaitAll(t, recvs, &got, d); !s.ok()) return s;
    if (auto s = WaitAll(t, sends, nullptr, d); !s.ok()) return s;
    for (int p = 0; p < P(); ++p) {
      if (auto s = Check(CheckPattern(got[p], p, me, 0, len(p, me))); !s.ok()) return s;
      transport::PeerCounters c = t.counters(p);
      if (c.sent_bytes != len(me, p) || c.recv_bytes != len(p, me) || c.sent_messages != 1 ||
          c.recv_messages != 1) {
        return absl::InternalError(absl::StrCat("rank ", me, " counters for ", p, ": sent ",
                                                c.sent_bytes, "/", c.sent_messages, " recv ",
                                                c.recv_bytes, "/", c.recv_messages));
      }
    }
    transport::PeerCounters total = t.TotalCounters();
    if (total.sent_messages != static_cast<uint64_t>(P())) {
      return absl::InternalError("total sent_messages");
    }
    t.ResetCounters();
    total = t.TotalCounters();
    if (total.sent_bytes + total.recv_bytes + total.sent_messages + total.recv_messages != 0) {
      return absl::InternalError("counters not reset");
    }
    return absl::OkStatus();
  });
}

// Several messages on one (peer, tag) arrive in send order, whether the
// receives are posted before or after the messages arrive.
TEST_P(TransportConformance, SameTagFifo) {
  constexpr int kMessages = 6;
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    transport::Deadline d = transport::DeadlineIn(kStepTimeout);
    std::vector<transport::RequestId> recvs, sends;
    for (int i = 0; i < kMessages / 2; ++i) {
      auto r = t.PostRecv(prev, 9);
      if (!r.ok()) return r.status();
      recvs.push_back(*r);
    }
    for (int i = 0; i < kMessages; ++i) {
      // Sizes cross UCX's eager/rendezvous thresholds so protocols mix.
      auto s = t.PostSend(next, 9, Pattern(me, next, i, i % 2 ? 100 : 300000 + i));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    for (int i = kMessages / 2; i < kMessages; ++i) {
      auto r = t.PostRecv(prev, 9);
      if (!r.ok()) return r.status();
      recvs.push_back(*r);
    }
    std::vector<transport::Bytes> got;
    if (auto s = WaitAll(t, recvs, &got, d); !s.ok()) return s;
    if (auto s = WaitAll(t, sends, nullptr, d); !s.ok()) return s;
    for (int i = 0; i < kMessages; ++i) {
      auto s = Check(CheckPattern(got[i], prev, me, i, i % 2 ? 100 : 300000 + i));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  });
}

// Messages with different tags are matched by tag, not arrival order.
TEST_P(TransportConformance, DifferentTagsOutOfOrder) {
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    transport::Deadline d = transport::DeadlineIn(kStepTimeout);
    std::vector<transport::RequestId> sends;
    for (uint64_t tag : {uint64_t{1}, uint64_t{2}, uint64_t{3}, transport::kMaxTag}) {
      auto s = t.PostSend(next, tag, Pattern(me, next, static_cast<int>(tag % 1000), 64 + tag % 7));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    for (uint64_t tag : {transport::kMaxTag, uint64_t{3}, uint64_t{2}, uint64_t{1}}) {
      transport::Bytes got;
      auto r = t.PostRecv(prev, tag);
      if (!r.ok()) return r.status();
      if (auto s = t.Wait(*r, d, &got); !s.ok()) return s;
      auto s = Check(CheckPattern(got, prev, me, static_cast<int>(tag % 1000), 64 + tag % 7));
      if (!s.ok()) return s;
    }
    return WaitAll(t, sends, nullptr, d);
  });
}

TEST_P(TransportConformance, ZeroLength) {
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    absl::StatusOr<transport::Bytes> got = transport::SendRecv(
        t, next, 11, transport::Bytes(), prev, 11, transport::DeadlineIn(kStepTimeout));
    if (!got.ok()) return got.status();
    if (!got->empty()) return absl::InternalError("zero-length message arrived non-empty");
    if (t.counters(next).sent_messages != 1 || t.counters(prev).recv_messages != 1 ||
        t.counters(prev).recv_bytes != 0) {
      return absl::InternalError("zero-length counters");
    }
    return absl::OkStatus();
  });
}

TEST_P(TransportConformance, Large30MB) {
  constexpr size_t kLen = 30u << 20;
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    absl::StatusOr<transport::Bytes> got = transport::SendRecv(
        t, next, 12, Pattern(me, next, 0, kLen), prev, 12, transport::DeadlineIn(kStepTimeout));
    if (!got.ok()) return got.status();
    if (auto s = Check(CheckPattern(*got, prev, me, 0, kLen)); !s.ok()) return s;
    if (t.counters(prev).recv_bytes != kLen || t.counters(next).sent_bytes != kLen) {
      return absl::InternalError("large message counters");
    }
    return absl::OkStatus();
  });
}

// Receives of unknown size: one tag, sizes spanning short, eager and
// rendezvous protocols, received into exactly sized buffers.
TEST_P(TransportConformance, UnknownSizes) {
  const std::vector<size_t> sizes = {1, 7, 8192, 8193, 65537, 1 << 20, 3};
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    transport::Deadline d = transport::DeadlineIn(kStepTimeout);
    std::vector<transport::RequestId> sends;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto s = t.PostSend(next, 13, Pattern(me, next, i, sizes[i]));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto r = t.PostRecv(prev, 13);
      if (!r.ok()) return r.status();
      // Poll with Test for odd messages, Wait for even ones.
      transport::Bytes got;
      if (i % 2) {
        for (;;) {
          absl::StatusOr<bool> done = t.Test(*r, &got);
          if (!done.ok()) return done.status();
          if (*done) break;
          if (transport::Clock::now() > d) return absl::DeadlineExceededError("Test polling");
        }
      } else if (auto s = t.Wait(*r, d, &got); !s.ok()) {
        return s;
      }
      if (auto s = Check(CheckPattern(got, prev, me, i, sizes[i])); !s.ok()) return s;
    }
    return WaitAll(t, sends, nullptr, d);
  });
}

// A receive that never matches fails with DEADLINE_EXCEEDED on time, names
// the peer and tag, and leaves the transport usable after CancelAll.
TEST_P(TransportConformance, DeadlineExceeded) {
  constexpr milliseconds kWait{300};
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    auto r = t.PostRecv(prev, 777);
    if (!r.ok()) return r.status();
    auto start = transport::Clock::now();
    absl::Status s = t.Wait(*r, start + kWait, nullptr);
    auto took = transport::Clock::now() - start;
    if (!absl::IsDeadlineExceeded(s)) {
      return absl::InternalError(absl::StrCat("want DEADLINE_EXCEEDED, got ", s.ToString()));
    }
    if (took < kWait || took > kWait + milliseconds(500)) {
      return absl::InternalError(absl::StrCat(
          "timeout took ", std::chrono::duration_cast<milliseconds>(took).count(), " ms"));
    }
    if (!absl::StrContains(s.message(), "777") ||
        !absl::StrContains(s.message(), absl::StrCat("peer ", prev))) {
      return absl::InternalError(absl::StrCat("message lacks peer/tag: ", s.message()));
    }
    t.CancelAll(transport::DeadlineIn(milliseconds(1000)));
    // Still usable.
    absl::StatusOr<transport::Bytes> got = transport::SendRecv(
        t, next, 778, Pattern(me, next, 1, 10), prev, 778, transport::DeadlineIn(kStepTimeout));
    if (!got.ok()) return got.status();
    return Check(CheckPattern(*got, prev, me, 1, 10));
  });
}

TEST_P(TransportConformance, InvalidArguments) {
  Run([&](transport::Transport& t) -> absl::Status {
    auto expect_invalid = [&](absl::Status s, const char* what) -> absl::Status {
      if (absl::IsInvalidArgument(s)) return absl::OkStatus();
      return absl::InternalError(absl::StrCat(what, ": want INVALID_ARGUMENT, got ", s.ToString()));
    };
    absl::Status s;
    if (s = expect_invalid(t.PostSend(-1, 1, transport::Bytes(4)).status(), "send peer -1");
        !s.ok())
      return s;
    if (s = expect_invalid(t.PostSend(P(), 1, transport::Bytes(4)).status(), "send peer P");
        !s.ok())
      return s;
    if (s = expect_invalid(t.PostRecv(-1, 1).status(), "recv peer -1"); !s.ok()) return s;
    if (s = expect_invalid(t.PostRecv(P(), 1).status(), "recv peer P"); !s.ok()) return s;
    if (s = expect_invalid(t.PostSend(0, transport::kMaxTag + 1, transport::Bytes(4)).status(),
                           "send tag");
        !s.ok()) {
      return s;
    }
    if (s = expect_invalid(t.PostRecv(0, uint64_t{1} << 63).status(), "recv tag"); !s.ok()) {
      return s;
    }
    // Nothing was counted for rejected operations.
    transport::PeerCounters c = t.TotalCounters();
    if (c.sent_messages != 0 || c.recv_messages != 0) return absl::InternalError("counted");
    // An unknown request id is an error, not a hang.
    if (t.Wait(987654321, transport::DeadlineIn(milliseconds(100)), nullptr).ok()) {
      return absl::InternalError("Wait on unknown id succeeded");
    }
    return absl::OkStatus();
  });
}

// CancelAll releases pending receives; later traffic on the same tag is not
// stolen by them.
TEST_P(TransportConformance, CancelAllThenReuse) {
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    for (int i = 0; i < 3; ++i) {
      if (auto r = t.PostRecv(prev, 55 + i); !r.ok()) return r.status();
    }
    t.CancelAll(transport::DeadlineIn(milliseconds(1000)));
    // A message matched by a receive before it was cancelled is lost by
    // design, so learn that `next` has cancelled (it sends backwards after
    // CancelAll) before sending it anything on tag 55.
    absl::StatusOr<transport::Bytes> ack = transport::SendRecv(
        t, prev, 999, transport::Bytes{1}, next, 999, transport::DeadlineIn(kStepTimeout));
    if (!ack.ok()) return ack.status();
    absl::StatusOr<transport::Bytes> got = transport::SendRecv(
        t, next, 55, Pattern(me, next, 2, 33), prev, 55, transport::DeadlineIn(kStepTimeout));
    if (!got.ok()) return got.status();
    return Check(CheckPattern(*got, prev, me, 2, 33));
  });
}

std::vector<BackendParam> Params() {
  std::vector<BackendParam> out;
  for (int p = 1; p <= 5; ++p) out.push_back({"loopback", "", p});
  for (int p = 1; p <= 5; ++p) out.push_back({"sim", "", p});
  for (int p : {1, 4}) out.push_back({"forwarding", "", p});
#ifdef GRADEX_TEST_UCX
  for (const char* tls : GRADEX_TEST_UCX_TLS_SETS) {
    for (int p = 1; p <= 5; ++p) out.push_back({"ucx", tls, p});
  }
#endif
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, TransportConformance, ::testing::ValuesIn(Params()), ParamName);

}  // namespace
}  // namespace gradex::testing
