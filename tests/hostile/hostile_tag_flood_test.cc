// A member flooding tags no schedule receives (UCX over tcp, two ranks in
// this process): the receiver drains what no receive took, counts it against
// the sender, blames the sender past its cap (RESOURCE_EXHAUSTED naming it)
// and drops the rest, so its memory stays bounded (before: UCX kept every
// message, an honest agent grew from 25 MB to 1.46 GB).
// HOSTILE_TAG_FLOOD_UNGUARDED=1 runs the same flood without the cap, to
// measure what UCX keeps (the bounds below then fail).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/tag_space.h"
#include "gtest/gtest.h"
#include "ps/dgs_exchange.h"
#include "tests/dgs/dgs_util.h"
#include "tests/transport/test_util.h"
#include "tests/transport/ucx_world.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::testing {
namespace {

using std::chrono::milliseconds;

size_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  size_t kb = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> kb;
      return kb * 1024;
    }
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

struct Flood {
  int messages;
  size_t bytes;  // each
};

// Rank 1 sends `flood` on tags rank 0 never receives, then a last message on
// the tag rank 0 waits on. Rank 0's wait ends with what is returned; it then
// keeps its worker progressing (a receive polled, as an agent's other waits
// would) until rank 1 is done, its RSS sampled all along.
struct Outcome {
  absl::Status wait;
  size_t rss_growth = 0;  // the largest seen
  transport::PeerCounters counters;
};

Outcome RunFlood(const Flood& flood, const transport::ucx::UcxOptions& options) {
  constexpr uint64_t kLegitTag = 7;
  Outcome out;
  std::atomic<bool> sent{false};
  std::vector<absl::Status> st =
      RunUcxWorld(2, options, [&](transport::Transport& t) -> absl::Status {
        if (t.rank() == 1) {
          absl::Status failed;
          for (int i = 0; i < flood.messages && failed.ok(); ++i) {
            // Tags no schedule receives: a phase and sequences no call uses.
            absl::StatusOr<transport::RequestId> s =
                t.PostSend(0, (uint64_t{0xEE} << 40) | i, transport::Bytes(flood.bytes, 1));
            // Eager sends end at once; waiting keeps the sender's memory flat.
            failed = s.ok() ? t.Wait(*s, transport::DeadlineIn(milliseconds(10000)), nullptr)
                            : s.status();
          }
          if (failed.ok()) {
            absl::StatusOr<transport::RequestId> s =
                t.PostSend(0, kLegitTag, transport::Bytes(8, 2));
            if (s.ok()) (void)t.Wait(*s, transport::DeadlineIn(milliseconds(5000)), nullptr);
          }
          sent = true;
          return failed;
        }
        const size_t rss_before = RssBytes();
        auto sample = [&] {
          const size_t now = RssBytes();
          out.rss_growth = std::max(out.rss_growth, now > rss_before ? now - rss_before : 0);
        };
        auto drive = [&] {  // progress (and the drain) through receives nobody sends to
          absl::StatusOr<transport::RequestId> more = t.PostRecv(1, kLegitTag + 1);
          if (more.ok()) (void)t.Test(*more, nullptr);
        };
        // The legitimate message is received once the flood is in: posted
        // before it, UCX could match it as it arrives while the drain (256
        // messages a progress call) is still behind the sender's cap.
        const bool guarded = options.unexpected_messages_per_peer > 0;
        const transport::Deadline end = transport::DeadlineIn(milliseconds(30000));
        for (int i = 0; (guarded ? t.blame(1).ok() : !sent) && transport::Clock::now() < end; ++i) {
          drive();
          if (i % 64 == 0) sample();
        }
        absl::StatusOr<transport::RequestId> r = t.PostRecv(1, kLegitTag);
        transport::Bytes got;
        out.wait =
            r.ok() ? t.Wait(*r, transport::DeadlineIn(milliseconds(30000)), &got) : r.status();
        for (int i = 0; !sent && transport::Clock::now() < end; ++i) {
          drive();
          if (i % 64 == 0) sample();
        }
        for (int i = 0; i < 100; ++i) drive();  // what is still in the socket
        sample();
        out.counters = t.counters(1);
        t.CancelAll(transport::DeadlineIn(milliseconds(1000)));
        return absl::OkStatus();
      });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  return out;
}

transport::ucx::UcxOptions Options() {
  transport::ucx::UcxOptions o;
  o.tls = "tcp";
  o.connect_timeout = milliseconds(10000);
  o.unexpected_bytes_per_peer = size_t{16} << 20;
  o.unexpected_messages_per_peer = 4096;
  if (std::getenv("HOSTILE_TAG_FLOOD_UNGUARDED") != nullptr) {
    o.unexpected_bytes_per_peer = 0;
    o.unexpected_messages_per_peer = 0;
  }
  return o;
}

// 3,000 messages of 64 KiB (eager: below the 256 KiB threshold, so UCX holds
// each payload): 188 MiB on tags nobody receives.
TEST(HostileTagFlood, ABytesFloodIsBlamedOnItsSenderAndMemoryStaysBounded) {
  const Outcome o = RunFlood({3000, 64 * 1024}, Options());
  std::printf("bytes flood: rank 0 RSS +%.1f MiB, early %llu, dropped %llu: %s\n",
              o.rss_growth / 1048576.0, static_cast<unsigned long long>(o.counters.early_messages),
              static_cast<unsigned long long>(o.counters.dropped_messages),
              o.wait.ToString().c_str());
  EXPECT_TRUE(absl::IsResourceExhausted(o.wait)) << o.wait;
  EXPECT_TRUE(absl::StrContains(o.wait.message(), "peer 1 is blamed")) << o.wait;
  // The 16 MiB cap, plus UCX's and the allocator's slack; the flood is 188 MiB.
  EXPECT_LT(o.rss_growth, size_t{64} << 20);
  EXPECT_GT(o.counters.early_messages, 256u);
  EXPECT_GT(o.counters.dropped_messages, 1000u);
}

// 20,000 messages of 16 bytes: the message cap (4,096) blames the sender.
TEST(HostileTagFlood, AMessageFloodIsBlamedOnItsSender) {
  const Outcome o = RunFlood({20000, 16}, Options());
  std::printf("message flood: rank 0 RSS +%.1f MiB, early %llu, dropped %llu: %s\n",
              o.rss_growth / 1048576.0, static_cast<unsigned long long>(o.counters.early_messages),
              static_cast<unsigned long long>(o.counters.dropped_messages),
              o.wait.ToString().c_str());
  EXPECT_TRUE(absl::IsResourceExhausted(o.wait)) << o.wait;
  EXPECT_TRUE(absl::StrContains(o.wait.message(), "4097 messages")) << o.wait;
  EXPECT_GT(o.counters.dropped_messages, 10000u);
}

// Messages sent ahead of their receives, under the cap, are all delivered in
// order once the receives come (what a faster peer does every step).
TEST(HostileTagFlood, EarlyMessagesUnderTheCapAreDeliveredInOrder) {
  transport::ucx::UcxOptions o = Options();
  std::vector<absl::Status> st = RunUcxWorld(2, o, [&](transport::Transport& t) -> absl::Status {
    const int other = 1 - t.rank();
    // 1,000 messages on 10 tags (100 each, FIFO per tag), sizes up to 300 KiB
    // (past the eager threshold), all sent before any receive is posted.
    std::vector<transport::RequestId> sends;
    for (int i = 0; i < 1000; ++i) {
      const size_t len = (i % 50 == 0) ? 300 * 1024 : 100 + i;
      absl::StatusOr<transport::RequestId> s =
          t.PostSend(other, i % 10, Pattern(t.rank(), other, i, len));
      if (!s.ok()) return s.status();
      sends.push_back(*s);
    }
    std::this_thread::sleep_for(milliseconds(200));
    for (int i = 0; i < 1000; ++i) {
      const size_t len = (i % 50 == 0) ? 300 * 1024 : 100 + i;
      absl::StatusOr<transport::RequestId> r =
          i % 3 == 0 ? t.PostRecvAtMost(other, i % 10, len) : t.PostRecv(other, i % 10);
      if (!r.ok()) return r.status();
      transport::Bytes got;
      if (absl::Status w = t.Wait(*r, transport::DeadlineIn(milliseconds(10000)), &got); !w.ok())
        return w;
      if (std::string e = CheckPattern(got, other, t.rank(), i, len); !e.empty()) {
        return absl::DataLossError(absl::StrCat("message ", i, ": ", e));
      }
    }
    for (transport::RequestId s : sends) {
      if (absl::Status w = t.Wait(s, transport::DeadlineIn(milliseconds(10000)), nullptr);
          !w.ok()) {
        return w;
      }
    }
    return t.counters(other).dropped_messages == 0
               ? absl::OkStatus()
               : absl::InternalError("an honest peer's messages were dropped");
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

// A DGS server on UCX (rank 2) with an honest worker (rank 0) and a worker
// that floods the server with DGS-phase messages of a shard it does not have
// (rank 1): the server blames and drops the flooder, its memory stays
// bounded, and the honest worker steps on.
TEST(HostileTagFlood, ADgsServerDropsAFloodingWorkerAndServesTheOthers) {
  const ps::DgsLayout layout = dgs_test::MakeLayout({4000});
  constexpr ps::DgsJob kJob{7, 3};
  const transport::ucx::UcxOptions options = Options();
  std::atomic<bool> flooded{false}, stop{false};
  ps::DgsServerStats stats;
  size_t rss_growth = 0;
  absl::Status worker_after;
  std::vector<absl::Status> st =
      RunUcxWorld(3, options, [&](transport::Transport& t) -> absl::Status {
        if (t.rank() == 2) {
          ps::DgsServerShard shard =
              *ps::DgsServerShard::Create(layout, 0, {0, 4000}, {.workers = 2});
          ps::DgsServer server(t, kJob, shard, {0, 1});
          const size_t rss_before = RssBytes();
          while (!stop.load()) {
            if (absl::Status s = server.ServeUntil(transport::DeadlineIn(milliseconds(20)));
                !s.ok()) {
              return s;
            }
            const size_t now = RssBytes();
            rss_growth = std::max(rss_growth, now > rss_before ? now - rss_before : 0);
          }
          stats = server.stats();
          return absl::OkStatus();
        }
        if (t.rank() == 1) {
          absl::Status failed;
          for (int i = 0; i < 3000 && failed.ok(); ++i) {
            absl::StatusOr<transport::RequestId> s =
                t.PostSend(2, collectives::MessageTag(collectives::kTagPhaseDgs, 999, i),
                           transport::Bytes(64 * 1024, 1));
            failed = s.ok() ? t.Wait(*s, transport::DeadlineIn(milliseconds(10000)), nullptr)
                            : s.status();
          }
          flooded = true;
          return absl::OkStatus();  // its later sends may fail: it was dropped
        }
        ps::DgsPushPull link(t, kJob, {{0, 2}});
        const ps::DgsWorkerOptions o{.momentum = 0.5f, .weight_decay = 0, .density = 0.1f};
        ps::DgsWorkerState w = *ps::DgsWorkerState::Create(layout, 0, {{0, 4000}}, o);
        std::mt19937 rng(3);
        std::vector<float> params(4000, 0.f);
        absl::Status s = link.Join(w, params, transport::DeadlineIn(milliseconds(20000)));
        while (s.ok() && !flooded.load()) {
          s = link.Step(w, dgs_test::IntGrad(4000, rng), params, 1,
                        transport::DeadlineIn(milliseconds(20000)));
        }
        for (int i = 0; i < 5 && s.ok(); ++i) {
          s = link.Step(w, dgs_test::IntGrad(4000, rng), params, 1,
                        transport::DeadlineIn(milliseconds(20000)));
        }
        worker_after = s;
        stop = true;
        return absl::OkStatus();
      });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
  std::printf("DGS server: RSS +%.1f MiB, workers blamed %llu: %s\n", rss_growth / 1048576.0,
              static_cast<unsigned long long>(stats.workers_blamed), stats.last_blame.c_str());
  EXPECT_TRUE(worker_after.ok()) << worker_after;
  EXPECT_EQ(stats.workers_blamed, 1u);
  EXPECT_TRUE(absl::StrContains(stats.last_blame, "peer 1 is blamed")) << stats.last_blame;
  EXPECT_LT(rss_growth, size_t{64} << 20);
}

}  // namespace
}  // namespace gradex::testing
