// A parameter-server plan as the agent takes it (member/ps_plan.h,
// grpc_messages.cc's ToPlan): roles and the shard / slot tables, every field
// bounded by the plan itself and every refusal naming its field.
#include "member/ps_plan.h"

#include <gtest/gtest.h>

#include <functional>

#include "member/grpc_messages.h"

namespace gradex {
namespace {

// Ranks 0 and 2 workers (slots 1 and 0), rank 1 the server of both shards.
gradex::v1::Plan PsPlanMessage() {
  gradex::v1::Plan m;
  m.set_version(3);
  m.set_epoch(2);
  m.set_algorithm("dgs");
  m.set_density(0.01);
  m.set_teams(1);
  m.set_barrier_period(64);
  m.set_step_deadline_ms(1000);
  for (int r = 0; r < 3; ++r) {
    gradex::v1::Member* mem = m.add_members();
    mem->set_rank(r);
    mem->set_agent_id("a" + std::to_string(r));
    mem->set_ucx_address("127.0.0.1:1");
    mem->set_role(r == 1 ? gradex::v1::ROLE_SERVER : gradex::v1::ROLE_WORKER);
  }
  gradex::v1::PsPlan* ps = m.mutable_ps();
  ps->set_shards(2);
  for (uint32_t s = 0; s < 2; ++s) {
    ps->add_assignments()->set_shard(s);
    ps->mutable_assignments(s)->set_rank(1);
  }
  ps->add_layer_sizes(10);
  ps->add_layer_sizes(5);
  for (int slot : {1, -1, 0}) ps->add_worker_slot(slot);
  ps->set_worker_slots(2);
  ps->set_max_staleness(1);
  ps->set_snapshot_interval_ms(500);
  return m;
}

TEST(PsPlan, AGoodPlanCarriesRolesShardsAndSlots) {
  absl::StatusOr<member::Plan> p = member::ToPlan(PsPlanMessage(), 0);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->ps.has_value());
  EXPECT_FALSE(p->members[0].server);
  EXPECT_TRUE(p->members[1].server);
  EXPECT_EQ(p->ps->shards, 2u);
  EXPECT_EQ(p->ps->shard_rank, (std::vector<int>{1, 1}));
  EXPECT_EQ(p->ps->layer_sizes, (std::vector<uint32_t>{10, 5}));
  EXPECT_EQ(p->ps->worker_slot, (std::vector<int>{1, -1, 0}));
  EXPECT_EQ(p->ps->worker_slots, 2u);
  EXPECT_EQ(p->ps->max_staleness, 1u);
  EXPECT_EQ(p->ps->snapshot_interval, std::chrono::milliseconds(500));
  // A collective plan has none.
  gradex::v1::Plan c = PsPlanMessage();
  c.set_algorithm("spardl");
  c.clear_ps();
  absl::StatusOr<member::Plan> q = member::ToPlan(c, 0);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_FALSE(q->ps.has_value());
}

TEST(PsPlan, EveryOutOfRangeFieldRefusesThePlanNamingIt) {
  using Edit = std::function<void(gradex::v1::PsPlan*)>;
  const std::vector<std::pair<Edit, const char*>> bad = {
      {[](auto* p) { p->set_shards(0); }, "ps.shards"},
      {[](auto* p) { p->set_shards(4097); }, "ps.shards"},
      {[](auto* p) { p->mutable_assignments()->RemoveLast(); }, "ps.assignments"},
      {[](auto* p) { p->mutable_assignments(1)->set_shard(0); }, "ps.assignments"},
      {[](auto* p) { p->mutable_assignments(0)->set_rank(3); }, "ps.assignments"},
      {[](auto* p) { p->mutable_assignments(0)->set_rank(-1); }, "ps.assignments"},
      {[](auto* p) { p->mutable_assignments(0)->set_rank(0); }, "not a SERVER"},  // a worker
      {[](auto* p) { p->clear_layer_sizes(); }, "ps.layer_sizes"},
      {[](auto* p) { p->set_layer_sizes(1, 0); }, "ps.layer_sizes"},
      {[](auto* p) {
         p->set_layer_sizes(0, 0xFFFFFFFFu);
         p->set_layer_sizes(1, 2);
       },
       "ps.layer_sizes"},
      {[](auto* p) { p->set_worker_slots(0); }, "ps.worker_slots"},
      {[](auto* p) { p->set_worker_slots(65537); }, "ps.worker_slots"},
      {[](auto* p) { p->mutable_worker_slot()->RemoveLast(); }, "ps.worker_slot"},
      {[](auto* p) { p->set_worker_slot(1, 0); }, "server rank 1 has a slot"},
      {[](auto* p) { p->set_worker_slot(0, 2); }, "ps.worker_slot"},   // >= worker_slots
      {[](auto* p) { p->set_worker_slot(0, -1); }, "ps.worker_slot"},  // a worker without one
      {[](auto* p) { p->set_worker_slot(2, 1); }, "taken"},            // two workers, one slot
      {[](auto* p) { p->set_max_staleness((uint64_t{1} << 32) + 1); }, "ps.max_staleness"},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    gradex::v1::Plan m = PsPlanMessage();
    bad[i].first(m.mutable_ps());
    absl::StatusOr<member::Plan> p = member::ToPlan(m, 0);
    ASSERT_FALSE(p.ok()) << "case " << i;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << i;
    EXPECT_NE(p.status().message().find(bad[i].second), std::string::npos)
        << "case " << i << ": " << p.status();
  }
}

}  // namespace
}  // namespace gradex
