// ServerShards (services/coordinator/controllers/server_shards.h): the count is fixed
// once (configured, else one per host), shards go round-robin to the SERVER
// members in rank order, a roster without servers is refused and dated.
#include "services/coordinator/controllers/server_shards.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace gradex::coordinator {
namespace {

controllers::ShardCandidate W(uint64_t id, const char* host) { return {id, host, false}; }
controllers::ShardCandidate S(uint64_t id, const char* host) { return {id, host, true}; }

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(ServerShardsTest, OnePerHostByDefaultRoundRobinOverServers) {
  controllers::ServerShards s(0, 8);
  // Three hosts, two servers (ranks 1 and 3).
  auto a = s.Assign({W(10, "a"), S(11, "a"), W(12, "b"), S(13, "c")}, kT0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shards, 3u);
  EXPECT_EQ(a->rank_of_shard, (std::vector<int>{1, 3, 1}));
  EXPECT_EQ(s.holder(0), 11u);
  EXPECT_EQ(s.holder(1), 13u);
  EXPECT_EQ(s.holder(3), 0u);  // no such shard
  EXPECT_EQ(s.moves(), 0u);
}

TEST(ServerShardsTest, ConfiguredCountWins) {
  controllers::ServerShards s(5, 8);
  auto a = s.Assign({S(1, "a"), W(2, "a")}, kT0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shards, 5u);
  EXPECT_EQ(a->rank_of_shard, (std::vector<int>(5, 0)));
}

TEST(ServerShardsTest, CountIsFixedAfterTheFirstAssignment) {
  controllers::ServerShards s(0, 8);
  ASSERT_TRUE(s.Assign({S(1, "a"), W(2, "b")}, kT0).ok());
  EXPECT_EQ(s.shards(), 2u);
  // A later epoch on four hosts keeps two shards: servers hold one range each.
  auto a = s.Assign({S(1, "a"), W(2, "b"), W(3, "c"), W(4, "d")}, kT0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shards, 2u);
}

TEST(ServerShardsTest, NoServerIsRefusedAndDatedUntilOneComes) {
  controllers::ServerShards s(1, 8);
  ASSERT_TRUE(s.Assign({S(1, "a"), W(2, "a")}, kT0).ok());
  auto none = s.Assign({W(2, "a")}, kT0 + absl::Seconds(1));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(none.status().message()).find("no SERVER member"), std::string::npos);
  EXPECT_EQ(s.unserved_since(), kT0 + absl::Seconds(1));
  // Still unserved a second later: the first time stays.
  EXPECT_FALSE(s.Assign({W(2, "a")}, kT0 + absl::Seconds(2)).ok());
  EXPECT_EQ(s.unserved_since(), kT0 + absl::Seconds(1));
  // A restarted server (another member id) takes the shard: counted as a move.
  auto back = s.Assign({W(2, "a"), S(7, "a")}, kT0 + absl::Seconds(3));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rank_of_shard, (std::vector<int>{1}));
  EXPECT_EQ(s.unserved_since(), absl::InfiniteFuture());
  EXPECT_EQ(s.moves(), 1u);
  EXPECT_EQ(s.holder(0), 7u);
}

TEST(ServerShardsTest, ManyHostsAreCappedAtTheLimit) {
  controllers::ServerShards s(0, 5000);
  std::vector<controllers::ShardCandidate> roster;
  std::vector<std::string> hosts;
  for (int i = 0; i < 5000; ++i) hosts.push_back(absl::StrCat("h", i));
  for (int i = 0; i < 5000; ++i) roster.push_back({uint64_t(i + 1), hosts[i], i == 0});
  auto a = s.Assign(roster, kT0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shards, controllers::kMaxServerShards);
  for (int r : a->rank_of_shard) EXPECT_EQ(r, 0);
}

TEST(ServerShardsTest, WorkersKeepTheirSlotsAndNewcomersTakeTheLowestFree) {
  controllers::ServerShards s(1, 3);
  auto a = s.Assign({S(1, "a"), W(2, "a"), W(3, "a"), W(4, "a")}, kT0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->slot_of_rank, (std::vector<int>{-1, 0, 1, 2}));
  // Worker 3 died; the survivors keep their slots though their ranks moved.
  a = s.Assign({S(1, "a"), W(2, "a"), W(4, "a")}, kT0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->slot_of_rank, (std::vector<int>{-1, 0, 2}));
  // Its replacement (a new member) takes the freed slot 1.
  a = s.Assign({W(9, "a"), S(1, "a"), W(2, "a"), W(4, "a")}, kT0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->slot_of_rank, (std::vector<int>{1, -1, 0, 2}));
  EXPECT_EQ(a->rank_of_shard, (std::vector<int>{1}));
}

TEST(ServerShardsTest, MoreWorkersThanSlotsIsRefused) {
  controllers::ServerShards s(1, 1);
  auto a = s.Assign({S(1, "a"), W(2, "a"), W(3, "a")}, kT0);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(a.status().message()).find("2 workers"), std::string::npos);
}

}  // namespace
}  // namespace gradex::coordinator
