// A push a shard refuses (for a reason other than "not joined" or "stale")
// is not lost: the worker puts its entries back into its velocity exactly
// (DgsWorkerState::Unsend) and the next step carries them, so every entry
// ends in M exactly once. The shard refuses because the push's bytes are
// broken on the way (a NaN value: refused by field, numbered; a message
// longer than any of the range's: refused unread, unnumbered, which the
// worker still matches at once instead of at its deadline).
#include <atomic>
#include <thread>

#include "collectives/wire/frame.h"
#include "ps/dgs_exchange.h"
#include "tests/dgs/dgs_util.h"
#include "transport/forwarding_transport.h"
#include "transport/loopback_transport.h"

namespace gradex::dgs_test {
namespace {

using std::chrono::milliseconds;

constexpr ps::DgsJob kJob{7, 3};

enum class Break { kNaN, kTooLong };

// Breaks the `nth` push (1-based) the worker sends to `shard`.
class BreakingTransport : public transport::ForwardingTransport {
 public:
  BreakingTransport(transport::Transport& inner, uint32_t shard, int nth, Break how, uint64_t cap)
      : transport::ForwardingTransport(inner), shard_(shard), nth_(nth), how_(how), cap_(cap) {}
  absl::StatusOr<transport::RequestId> PostSend(int peer, uint64_t tag,
                                                transport::Bytes payload) override {
    ps::DgsMessageHeader h;
    if (tag == ps::DgsUpTag(shard_) && payload.size() >= sizeof h) {
      std::memcpy(&h, payload.data(), sizeof h);
      const auto kind = static_cast<ps::DgsKind>(h.kind);
      if ((kind == ps::DgsKind::kPush || kind == ps::DgsKind::kDensePush) && ++pushes_ == nth_) {
        if (how_ == Break::kNaN) {
          const float nan = NAN;  // the first value of the first (dense) frame
          std::memcpy(payload.data() + sizeof h + sizeof(collectives::wire::FrameHeader), &nan,
                      sizeof nan);
        } else {
          payload.resize(cap_ + 1, 0);
        }
      }
    }
    return transport::ForwardingTransport::PostSend(peer, tag, std::move(payload));
  }

 private:
  uint32_t shard_;
  int nth_;
  Break how_;
  uint64_t cap_;
  int pushes_ = 0;
};

struct Case {
  Break how;
  ps::DgsRefusal reason;
};

class DgsRefusedPush : public ::testing::TestWithParam<Case> {};

// One worker, two shards (layers of 12 and 8: shard ranges [0,10), [10,20)),
// density 1, momentum 1/2, lr 1, no weight decay, integer gradients: every
// value is exact. Shard 1 refuses the worker's second push. In closed form,
// with a1 = g1, a2 = a1/2 + g2:
//   shard 0 (applied every push):  M0 − M = g1 + a2 + (a2/2 + g3)
//   shard 1 (push 2 refused, put back as u = a2/m = 2·a2):
//                                  M0 − M = g1 + (a2 + g3)
TEST_P(DgsRefusedPush, TheRefusedPartGoesBackIntoTheVelocityExactly) {
  const ps::DgsLayout layout = MakeLayout({12, 8});
  const std::vector<ps::DgsRange> ranges = *layout.SplitShards(2);
  auto t = transport::CreateLoopbackTransports(3);
  std::vector<std::unique_ptr<ps::DgsServerShard>> shards;
  std::vector<std::unique_ptr<ps::DgsServer>> servers;
  for (uint32_t s = 0; s < 2; ++s) {
    shards.push_back(std::make_unique<ps::DgsServerShard>(
        *ps::DgsServerShard::Create(layout, s, ranges[s], {.workers = 1})));
    servers.push_back(std::make_unique<ps::DgsServer>(*t[1 + s], kJob, *shards[s], std::vector{0}));
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (auto& server : servers) {
    threads.emplace_back([&stop, s = server.get()] {
      while (!stop.load()) {
        if (!s->ServeUntil(transport::DeadlineIn(milliseconds(20))).ok()) return;
      }
    });
  }
  BreakingTransport breaking(*t[0], 1, 2, GetParam().how,
                             ps::DgsMaxMessageBytes(layout, ranges[1]));
  ps::DgsPushPull link(breaking, kJob, {{0, 1}, {1, 2}});
  ps::DgsWorkerState w = *ps::DgsWorkerState::Create(
      layout, 0, ranges, {.momentum = 0.5f, .weight_decay = 0, .density = 1});
  std::mt19937 rng(11);
  std::vector<float> params = IntGrad(20, rng);
  const std::vector<float> m0 = params;
  const std::vector<float> g1 = IntGrad(20, rng), g2 = IntGrad(20, rng), g3 = IntGrad(20, rng);
  const transport::Deadline far = transport::DeadlineIn(milliseconds(20000));

  ASSERT_TRUE(link.Step(w, g1, params, 1, far).ok());
  const transport::Clock::time_point start = transport::Clock::now();
  absl::Status s = link.Step(w, g2, params, 1, far);
  EXPECT_LT(transport::Clock::now() - start, milliseconds(10000))
      << "matched at once, not at the deadline";
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_NE(msg.find(ps::DgsRefusalName(GetParam().reason)), std::string::npos) << s;
  EXPECT_NE(msg.find("not applied"), std::string::npos) << s;
  EXPECT_NE(msg.find("back in the worker's velocity"), std::string::npos) << s;
  EXPECT_FALSE(w.joined(1));
  EXPECT_TRUE(w.joined(0));
  std::vector<float> a2(20);
  for (int i = 0; i < 20; ++i) {
    a2[i] = g1[i] / 2 + g2[i];
    // Shard 1's part is unsent again (u = a/m); shard 0's was sent (u = a).
    EXPECT_EQ(w.velocity()[i], i >= 10 ? 2 * a2[i] : a2[i]) << i;
  }
  ASSERT_TRUE(link.Step(w, g3, params, 1, far).ok());  // rejoins shard 1, re-syncs, pushes
  stop.store(true);
  for (std::thread& th : threads) th.join();

  EXPECT_EQ(shards[0]->version(), 3u);
  EXPECT_EQ(shards[1]->version(), 2u);
  EXPECT_EQ(shards[1]->refused()[static_cast<size_t>(GetParam().reason)], 1u);
  for (uint32_t i = 0; i < 20; ++i) {
    const float applied = i < 10 ? g1[i] + a2[i] + (a2[i] / 2 + g3[i]) : g1[i] + (a2[i] + g3[i]);
    const ps::DgsServerShard& sh = *shards[i < 10 ? 0 : 1];
    EXPECT_EQ(m0[i] - sh.model()[i - sh.range().begin], applied) << "entry " << i;
    EXPECT_EQ(params[i], sh.model()[i - sh.range().begin]) << "entry " << i;  // ASGD: params = M
  }
}

// max_staleness 1, two workers: worker 1 joins and idles, so worker 0's
// second push is held; worker 0 gives up at its deadline (fate unknown: not
// put back yet). Its next step's hello supersedes the held push, which the
// shard drops and names in the full sync: the worker puts it back, and the
// push after (worker 1 has left) carries it. Density 1, m = 1/2, integers:
//   M0 − M = g1 + (a2 + g3), a2 = g1/2 + g2.
TEST(DgsHeldPush, AHeldPushDroppedOnTheHelloIsPutBack) {
  const ps::DgsLayout layout = MakeLayout({12});
  auto t = transport::CreateLoopbackTransports(3);
  ps::DgsServerShard shard =
      *ps::DgsServerShard::Create(layout, 0, {0, 12}, {.workers = 2, .max_staleness = 1});
  ps::DgsServer server(*t[2], kJob, shard, {0, 1});
  std::atomic<bool> stop{false};
  std::thread serving([&] {
    while (!stop.load()) {
      if (!server.ServeUntil(transport::DeadlineIn(milliseconds(20))).ok()) return;
    }
  });
  ps::DgsPushPull link0(*t[0], kJob, {{0, 2}}), link1(*t[1], kJob, {{0, 2}});
  const ps::DgsWorkerOptions o{.momentum = 0.5f, .weight_decay = 0, .density = 1};
  ps::DgsWorkerState w0 = *ps::DgsWorkerState::Create(layout, 0, {{0, 12}}, o);
  ps::DgsWorkerState w1 = *ps::DgsWorkerState::Create(layout, 1, {{0, 12}}, o);
  std::mt19937 rng(12);
  std::vector<float> p0 = IntGrad(12, rng), p1 = p0;
  const std::vector<float> m0 = p0;
  const std::vector<float> g1 = IntGrad(12, rng), g2 = IntGrad(12, rng), g3 = IntGrad(12, rng);
  ASSERT_TRUE(link1.Join(w1, p1, transport::DeadlineIn(milliseconds(20000))).ok());
  ASSERT_TRUE(link0.Step(w0, g1, p0, 1, transport::DeadlineIn(milliseconds(20000))).ok());
  absl::Status s = link0.Step(w0, g2, p0, 1, transport::DeadlineIn(milliseconds(300)));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(std::string(s.message()).find("unknown"), std::string::npos) << s;
  EXPECT_EQ(shard.version(), 1u);
  ASSERT_TRUE(link1.Leave(w1, transport::DeadlineIn(milliseconds(20000))).ok());
  ASSERT_TRUE(link0.Step(w0, g3, p0, 1, transport::DeadlineIn(milliseconds(20000))).ok());
  stop.store(true);
  serving.join();
  EXPECT_EQ(shard.version(), 2u);
  EXPECT_GE(server.stats().held, 1u);
  for (uint32_t i = 0; i < 12; ++i) {
    const float a2 = g1[i] / 2 + g2[i];
    EXPECT_EQ(m0[i] - shard.model()[i], g1[i] + (a2 + g3[i])) << "entry " << i;
    EXPECT_EQ(p0[i], shard.model()[i]) << "entry " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Breaks, DgsRefusedPush,
                         ::testing::Values(Case{Break::kNaN, ps::DgsRefusal::kNonFinite},
                                           Case{Break::kTooLong, ps::DgsRefusal::kOverCapacity}));

}  // namespace
}  // namespace gradex::dgs_test
