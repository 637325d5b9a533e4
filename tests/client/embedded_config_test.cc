// The embedded coordinator's job config: what the client's options become,
// checked by the coordinator's own parser (so "auto" reaches the bucket
// controller instead of being replaced by a fixed algorithm).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gradex::client
