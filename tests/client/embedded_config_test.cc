// The embedded coordinator's job config: what the client's options become,
// checked by the coordinator's own parser (so "auto" reaches the bucket
// controller instead of being replaced by a fixed algorithm).
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "services/client/embedded_coordinator.h"
#include "services/coordinator/job_config.h"

namespace gradex::client {
namespace {

TEST(EmbeddedConfigTest, AutoReachesTheBucketController) {
  ClientOptions o;
  o.world_size = 3;
  o.algorithm = "auto";
  absl::StatusOr<std::string> config = EmbeddedJobConfig(o);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<coordinator::JobSettings> job = coordinator::ParseJobConfig(*config);
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << *config;
  EXPECT_TRUE(job->auto_algorithm);
  EXPECT_EQ(job->world_size, 3);
}

TEST(EmbeddedConfigTest, ANamedAlgorithmIsKeptAndAnUnknownOneRefused) {
  ClientOptions o;
  o.world_size = 2;
  o.algorithm = "spardl";
  absl::StatusOr<coordinator::JobSettings> job = coordinator::ParseJobConfig(*EmbeddedJobConfig(o));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->auto_algorithm);
  EXPECT_EQ(job->algorithm, "spardl");
  o.algorithm = "no-such-algorithm";
  absl::StatusOr<std::string> config = EmbeddedJobConfig(o);
  EXPECT_FALSE(config.ok() && coordinator::ParseJobConfig(*config).ok());
}

// Every plan-decided option reaches its JobConfig field (the option table's
// job_field), read back by the coordinator's own parser.
TEST(EmbeddedConfigTest, ThePlanDecidedOptionsReachTheirFields) {
  ClientOptions o;
  o.world_size = 4;
  o.algorithm = "spardl-bsag";
  o.density = 0.003;
  o.teams = 2;
  o.params["kprime"] = 5;
  absl::StatusOr<std::string> config = EmbeddedJobConfig(o);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<coordinator::JobSettings> job = coordinator::ParseJobConfig(*config);
  ASSERT_TRUE(job.ok()) << job.status() << "\n" << *config;
  EXPECT_EQ(job->algorithm, "spardl-bsag");
  EXPECT_EQ(job->density, 0.003);
  EXPECT_EQ(job->teams, 2);
  EXPECT_EQ(job->params.at("kprime"), 5);
  EXPECT_EQ(job->world_size, 4);
}

// Without a coordinator or a rendezvous (GradexState before
// init_process_group) both rank 0 and the others say what to do.
TEST(EmbeddedConfigTest, NoCoordinatorAndNoRendezvousNamesTheFix) {
  for (int rank : {1, 0}) {
    ClientOptions o;
    o.world_size = 2;
    o.rank = rank;
    absl::StatusOr<CoordinatorEndpoint> e = FindCoordinator(o, Rendezvous{});
    ASSERT_FALSE(e.ok()) << rank;
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(e.status().message());
    EXPECT_NE(msg.find("init_process_group() before gradex.torch.GradexState"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("GRADEX_COORDINATOR"), std::string::npos) << msg;
    EXPECT_NE(msg.find(absl::StrCat("rank ", rank)), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace gradex::client
