// The bucket controller over simulated hours, with the clock passed in: a
// job whose steps report one bucket, dense probes every 50 steps as the
// agents run them, and decisions applied where the coordinator puts them
// (the barrier at or after the deciding step + the lead). Timings around
// equality switch a bucket a bounded number of times; the dwell doubles
// with each switch back up to its cap; a clear, lasting difference still
// switches, and back after the dwell; where a switch falls depends on the
// steps, not on the clock.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "services/coordinator/controllers/bucket_controller.h"

namespace gradex::coordinator {
namespace {

constexpr uint64_t kN = 100000;

struct Switch {
  controllers::BucketSwitch sw;
  absl::Time at;
};

// Two ranks (rank 1's times 10% over rank 0's); the plan's algorithm
// "spardl"; every decision applied from NextBarrier(decided + lead), as
// Coordinator::Tick publishes it on an idle machine.
struct Sim {
  explicit Sim(controllers::BucketControllerOptions o = {},
               absl::Duration step_time = absl::Milliseconds(20))
      : c(o), step_time(step_time) {
    c.Configure("spardl", false, 0.01, 2, 1, 0);
  }

  // One step; seconds(dense) is the exchange's time on rank 0.
  void Step(const std::function<double(bool dense)>& seconds) {
    if (step % kBarrier == 0 && step >= kLead && c.PendingSince() <= step - kLead) {
      c.Apply(step - kLead, step);
      applied.push_back(step);
    }
    const std::vector<std::string> choices = c.Choices();
    const bool probe = step % kProbePeriod == kProbePeriod - 1;
    const bool dense = probe || (!choices.empty() && choices[0] == "dense-ring");
    const double s = seconds(dense);
    for (int r = 0; r < 2; ++r) {
      c.Feed(r, step, {{kN, dense ? "dense-ring" : "spardl", s * (1 + r / 10.0), probe}}, now);
    }
    for (const controllers::BucketSwitch& sw : c.TakeSwitches()) switches.push_back({sw, now});
    ++step;
    now += step_time;
  }
  void RunFor(absl::Duration d, const std::function<double(bool dense)>& seconds) {
    for (const absl::Time end = now + d; now < end;) Step(seconds);
  }
  bool dense() const { return !c.Choices().empty(); }

  static constexpr uint64_t kProbePeriod = 50, kBarrier = 64, kLead = 128;
  controllers::BucketController c;
  absl::Duration step_time;
  absl::Time now = absl::FromUnixSeconds(1000);
  uint64_t step = 0;
  std::vector<Switch> switches;
  std::vector<uint64_t> applied;  // the steps decisions were applied from
};

// Both sides about 15 ms: a load factor per side redrawn every second (0.7
// to 1.3: a shared host, one side hit harder than the other for a while)
// and 20% jitter per step, so that windows' medians cross the 10% margin both
// ways again and again.
std::function<double(bool)> AroundEquality(uint32_t seed, const Sim& sim) {
  auto rng = std::make_shared<std::mt19937>(seed);
  auto load = std::make_shared<std::pair<double, double>>(1.0, 1.0);
  auto drawn_at = std::make_shared<uint64_t>(~uint64_t{0});
  return [rng, load, drawn_at, &sim](bool dense) {
    std::uniform_real_distribution<double> swing(0.7, 1.3), jitter(0.8, 1.2);
    if (*drawn_at == ~uint64_t{0} || sim.step - *drawn_at >= 50) {
      *load = {swing(*rng), swing(*rng)};
      *drawn_at = sim.step;
    }
    return 0.015 * (dense ? load->second : load->first) * jitter(*rng);
  };
}

// The holds the options give: dwell, doubled per switch, capped.
absl::Duration Hold(const controllers::BucketControllerOptions& o, int n) {
  absl::Duration d = o.dwell;
  for (int i = 1; i < n; ++i) d = std::min(d * 2, o.max_dwell);
  return d;
}

TEST(BucketDwell, TimingsAroundEqualitySwitchABucketAtMostSevenTimesInAnHour) {
  const controllers::BucketControllerOptions o;
  // The bound: a switch after each of 30 + 60 + ... + 1920 s fits an hour
  // (3810 s do not, with the first switch at once).
  int bound = 1;
  for (absl::Duration t; t + Hold(o, bound) <= absl::Hours(1); t += Hold(o, bound)) ++bound;
  ASSERT_EQ(bound, 7);
  for (uint32_t seed : {1u, 2u, 3u}) {
    Sim sim;
    sim.RunFor(absl::Hours(1), AroundEquality(seed, sim));
    EXPECT_GE(sim.switches.size(), 1u) << "seed " << seed << ": the noise crosses the margin";
    EXPECT_LE(sim.switches.size(), static_cast<size_t>(bound)) << "seed " << seed;
    for (size_t i = 0; i < sim.switches.size(); ++i) {
      const controllers::BucketSwitch& sw = sim.switches[i].sw;
      EXPECT_EQ(sw.switches, static_cast<int>(i + 1));
      EXPECT_EQ(sw.hold, Hold(o, sw.switches));
      EXPECT_EQ(sw.to_dense, i % 2 == 0);
      if (i > 0) EXPECT_GE(sim.switches[i].at - sim.switches[i - 1].at, Hold(o, sw.switches - 1));
    }
    EXPECT_EQ(sim.applied.size(), sim.switches.size()) << "each switch applied once";
  }
  // Without the dwell and the second window the same noise flips the bucket
  // tens of times an hour (once per window, for 8 steps, at most): what the
  // rule is for.
  controllers::BucketControllerOptions eager;
  eager.dwell = absl::ZeroDuration();
  eager.confirm_windows = 1;
  size_t flips = 0;
  for (uint32_t seed : {1u, 2u, 3u}) {
    Sim sim(eager);
    sim.RunFor(absl::Hours(1), AroundEquality(seed, sim));
    flips += sim.switches.size();
  }
  EXPECT_GT(flips, 3u * 10 * bound);
}

TEST(BucketDwell, TheDwellDoublesWithEachSwitchBackUpToTheCap) {
  // Dense twice as fast, then twice as slow, as the sparse exchange, for
  // 120 s at a time (sparse is measured only while it runs: its last runs
  // stand for it while dense runs). The bucket follows, but never sooner
  // than its dwell after its last switch.
  const controllers::BucketControllerOptions o;
  Sim sim(o, absl::Milliseconds(100));
  const absl::Time start = sim.now;
  const auto alternating = [&](bool dense) {
    const bool dense_wins = ((sim.now - start) / absl::Seconds(120)) % 2 == 0;
    return dense ? (dense_wins ? 0.01 : 0.04) : 0.02;
  };
  sim.RunFor(absl::Hours(4), alternating);
  ASSERT_GE(sim.switches.size(), 9u);
  for (size_t i = 0; i < sim.switches.size(); ++i) {
    const controllers::BucketSwitch& sw = sim.switches[i].sw;
    EXPECT_EQ(sw.switches, static_cast<int>(i + 1));
    EXPECT_EQ(sw.to_dense, i % 2 == 0);
    EXPECT_EQ(sw.hold,
              std::min(absl::Seconds(30) * (int64_t{1} << std::min<size_t>(i, 20)), absl::Hours(1)))
        << i;
    if (i == 0) continue;
    const absl::Duration gap = sim.switches[i].at - sim.switches[i - 1].at;
    EXPECT_GE(gap, sim.switches[i - 1].sw.hold) << i;
    // Once the dwell is over, the next phase that favours the other side
    // switches it within its first seconds (two windows).
    EXPECT_LE(gap, sim.switches[i - 1].sw.hold + absl::Seconds(240)) << i;
  }
  EXPECT_EQ(sim.switches.back().sw.hold, absl::Hours(1));
}

TEST(BucketDwell, AClearLastingDifferenceSwitchesAtOnceAndBackAfterTheDwell) {
  Sim sim;
  // Dense twice as fast from the start. The third probe is step 149; the
  // sparse windows end at steps 154 (its first vote) and 162 (its second):
  // decided by step 162, applied from the barrier at or after 162 + 128.
  double dense_s = 0.01;
  const auto timings = [&](bool dense) { return dense ? dense_s : 0.02; };
  while (sim.switches.empty()) sim.Step(timings);
  EXPECT_TRUE(sim.switches[0].sw.to_dense);
  EXPECT_EQ(sim.switches[0].sw.decided_step, 162u);
  sim.RunFor(absl::Seconds(10), timings);
  ASSERT_EQ(sim.applied, (std::vector<uint64_t>{320}));
  EXPECT_TRUE(sim.dense());
  // Dense gets three times slower 10 s after the switch: sparse wins every
  // window from then on, but the bucket holds until its 30 s dwell is over.
  dense_s = 0.06;
  sim.RunFor(absl::Seconds(19), timings);
  EXPECT_EQ(sim.switches.size(), 1u);
  sim.RunFor(absl::Seconds(3), timings);
  ASSERT_EQ(sim.switches.size(), 2u);
  EXPECT_FALSE(sim.switches[1].sw.to_dense);
  EXPECT_GE(sim.switches[1].at - sim.switches[0].at, absl::Seconds(30));
  EXPECT_LE(sim.switches[1].at - sim.switches[0].at, absl::Seconds(31));
  sim.RunFor(absl::Seconds(5), timings);
  EXPECT_FALSE(sim.dense());
  // A lasting change back (dense twice as fast again) after that dwell
  // (60 s) switches once more; nothing else does.
  dense_s = 0.01;
  sim.RunFor(absl::Seconds(90), timings);
  ASSERT_EQ(sim.switches.size(), 3u);
  EXPECT_TRUE(sim.switches[2].sw.to_dense);
  EXPECT_EQ(sim.switches[2].sw.hold, absl::Seconds(120));
  EXPECT_TRUE(sim.dense());
}

TEST(BucketDwell, WhereASwitchFallsDependsOnTheStepsNotOnTheClock) {
  // The same timings per step on a fast and a slow host (steps of 5 ms and
  // of 200 ms, so the reports of a step arrive at other times): dense twice
  // as fast until step 8000 (40 s on the fast host, past its dwell), then
  // three times slower. The same deciding steps, applied from the same
  // barriers.
  std::vector<std::vector<uint64_t>> decided, applied;
  for (absl::Duration step_time : {absl::Milliseconds(5), absl::Milliseconds(200)}) {
    Sim sim({}, step_time);
    const auto timings = [&](bool dense) { return dense ? (sim.step < 8000 ? 0.01 : 0.06) : 0.02; };
    for (int i = 0; i < 9000; ++i) sim.Step(timings);
    decided.emplace_back();
    for (const Switch& s : sim.switches) decided.back().push_back(s.sw.decided_step);
    applied.push_back(sim.applied);
  }
  ASSERT_EQ(decided[0].size(), 2u);
  EXPECT_EQ(decided[0][0], 162u);
  EXPECT_GT(decided[0][1], 8000u);
  EXPECT_LT(decided[0][1], 8100u);
  EXPECT_EQ(decided[1], decided[0]);
  EXPECT_EQ(applied[1], applied[0]);
  EXPECT_EQ(applied[0].size(), 2u);
  EXPECT_EQ(applied[0][0], 320u);
}

}  // namespace
}  // namespace gradex::coordinator
