// Conformance of per-receive capacities (Transport::PostRecvAtMost: a receive
// bounded by what the schedule expects) on every Transport of the suite
// (conformance.h).
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/transport/conformance.h"

namespace gradex::testing {
namespace {

// A receive posted for at most C bytes (PostRecvAtMost) takes a message of
// up to C and refuses a longer one, short or rendezvous-sized, naming the
// peer and the sizes, counting it, and never allocating what the peer
// announced; the next message on the tag still arrives.
TEST_P(TransportConformance, ReceivesAtMostTheirPostedCapacity) {
  constexpr size_t kCap = 100;
  const std::vector<size_t> sizes = {kCap + 1, kCap, size_t{1} << 20, 0, kCap};
  Run([&](transport::Transport& t) -> absl::Status {
    const int me = t.rank(), next = (me + 1) % P(), prev = (me + P() - 1) % P();
    const transport::Deadline d = transport::DeadlineIn(kStepTimeout);
    std::vector<transport::RequestId> sends;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto s = t.PostSend(next, 17, Pattern(me, next, i, sizes[i]));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    uint64_t refused = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto r = t.PostRecvAtMost(prev, 17, kCap);
      if (!r.ok()) return r.status();
      transport::Bytes got;
      absl::Status s = t.Wait(*r, d, &got);
      if (sizes[i] > kCap) {
        ++refused;
        if (!absl::IsResourceExhausted(s) ||
            !absl::StrContains(s.message(), absl::StrCat("peer ", prev, " sent ", sizes[i])) ||
            !absl::StrContains(s.message(), absl::StrCat(kCap))) {
          return absl::InternalError(absl::StrCat("message ", i, " of ", sizes[i],
                                                  " bytes: want RESOURCE_EXHAUSTED naming peer ",
                                                  prev, " and both sizes, got ", s.ToString()));
        }
        if (got.size() > kCap) return absl::InternalError("a refused message was handed over");
        continue;
      }
      if (!s.ok()) return s;
      if (auto c = Check(CheckPattern(got, prev, me, i, sizes[i])); !c.ok()) return c;
    }
    if (t.counters(prev).refused_messages != refused) {
      return absl::InternalError(absl::StrCat(t.counters(prev).refused_messages,
                                              " refused messages counted, want ", refused));
    }
    if (t.TotalCounters().refused_messages != refused) {
      return absl::InternalError("refused messages from another peer");
    }
    return WaitAll(t, sends, nullptr, d);
  });
}

}  // namespace
}  // namespace gradex::testing
