// Members that fail close together, on a fake clock:
// leases lapsing up to a heartbeat interval apart make one epoch change, not
// one per failure (the loss settle window), and the job config bounds the
// window and the entry timeout by the lease.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "services/coordinator/job_config.h"
#include "services/coordinator/membership/membership.h"
#include "tests/coordinator/test_job.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);

JobSettings Job(int world) { return FaultsTestJob(world); }

// Members 3 and 4 of four stop together; their last heartbeats were `apart`
// from each other. Returns the epochs formed after epoch 1 and the
// evictions' causes.
struct StopRun {
  std::vector<uint64_t> epochs;
  std::vector<membership::MemberRecord::Cause> causes;
};
StopRun StopTwo(absl::Duration settle, absl::Duration lease, absl::Duration apart) {
  JobSettings s = Job(4);
  s.min_world_size = 2;
  s.lease = lease;
  s.entry_timeout = 10 * lease;
  s.loss_settle = settle;
  membership::Membership m(s);
  StartTestEpoch(m, t0, 4);
  StopRun out;
  std::vector<uint64_t> ev;
  const absl::Duration tick = absl::Milliseconds(100);
  for (absl::Time t = t0; t < t0 + 4 * lease; t += tick) {
    for (uint64_t id : {1, 2}) Beat(m, id, m.latest().number, t);
    // 3 stops at t0 (its last heartbeat), 4 `apart` later.
    if (t - t0 <= apart) Beat(m, 4, 1, t);
    if (m.Tick(t, &ev)) out.epochs.push_back(m.latest().number);
    for (const membership::MemberRecord& r : m.last_evicted()) out.causes.push_back(r.cause);
  }
  EXPECT_EQ(ev.size(), 2u);
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2}));
  return out;
}

TEST(LossSettle, TwoFailuresWithinTheWindowMakeOneEpochChange) {
  using C = membership::MemberRecord::Cause;
  // Without the window: one epoch per lost lease.
  StopRun each = StopTwo(absl::ZeroDuration(), absl::Seconds(3), absl::Milliseconds(800));
  EXPECT_EQ(each.epochs, (std::vector<uint64_t>{2, 3}));
  // With it (1 s): the second lease lapses inside the window, one change.
  StopRun one = StopTwo(absl::Seconds(1), absl::Seconds(3), absl::Milliseconds(800));
  EXPECT_EQ(one.epochs, (std::vector<uint64_t>{2}));
  EXPECT_EQ(one.causes, (std::vector<C>{C::kLease, C::kLease}));
}

TEST(LossSettle, AMemberSilentForTwoHeartbeatsFoldsIntoTheChange) {
  using C = membership::MemberRecord::Cause;
  // Lease 9 s (heartbeats every 3 s): the second lease lapses 2.5 s after
  // the first, past the 1 s window, but by then it has been silent for more
  // than two heartbeat intervals: it goes in the same change.
  StopRun each = StopTwo(absl::ZeroDuration(), absl::Seconds(9), absl::Milliseconds(2500));
  EXPECT_EQ(each.epochs, (std::vector<uint64_t>{2, 3}));
  StopRun one = StopTwo(absl::Seconds(1), absl::Seconds(9), absl::Milliseconds(2500));
  EXPECT_EQ(one.epochs, (std::vector<uint64_t>{2}));
  EXPECT_EQ(one.causes, (std::vector<C>{C::kLease, C::kSilent}));
}

TEST(LossSettle, ASingleLossWaitsOnlyTheWindow) {
  JobSettings s = Job(3);
  s.min_world_size = 2;
  s.loss_settle = absl::Milliseconds(500);
  membership::Membership m(s);
  StartTestEpoch(m, t0, 3);
  std::vector<uint64_t> ev;
  ASSERT_TRUE(m.Leave(3).ok());
  EXPECT_FALSE(m.Tick(t0 + absl::Seconds(1), &ev));
  EXPECT_FALSE(m.Tick(t0 + absl::Milliseconds(1499), &ev));
  ASSERT_TRUE(m.Tick(t0 + absl::Milliseconds(1500), &ev));
  EXPECT_EQ(m.latest().roster, (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(ev.empty());
}

TEST(JobConfigFaults, EntryTimeoutAndSettleAreBoundedByTheLease) {
  auto config = [](const std::string& extra) {
    return ParseJobConfig(
        R"({"job_id": "j", "world_size": 2, "algorithm": "spardl-bsag", "density": 0.01, "lease_ms": 3000)" +
        extra + "}");
  };
  absl::StatusOr<JobSettings> d = config("");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->entry_timeout, absl::Seconds(30));
  EXPECT_EQ(d->loss_settle, absl::Seconds(1));  // min(lease / 3, 1 s)
  auto short_entry = config(R"(, "entry_timeout_ms": 2999)");
  EXPECT_EQ(short_entry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_entry.status().message().find("entry_timeout_ms"), std::string::npos);
  auto long_settle = config(R"(, "loss_settle_ms": 3001)");
  EXPECT_EQ(long_settle.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_settle = config(R"(, "loss_settle_ms": 0, "entry_timeout_ms": 5000)");
  ASSERT_TRUE(no_settle.ok()) << no_settle.status();
  EXPECT_EQ(no_settle->loss_settle, absl::ZeroDuration());
  EXPECT_EQ(no_settle->entry_timeout, absl::Seconds(5));
}

}  // namespace
}  // namespace gradex::coordinator
