// The coordinator's standard gRPC health service (grpc.health.v1.Health),
// asked by the same client as gradex-health-probe: SERVING without the job
// token, NOT_FOUND for a service it does not serve, and unreachable after
// Shutdown; the hand-written message codec rejects what is not a response.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "services/coordinator/health_probe.h"
#include "services/coordinator/server.h"

namespace gradex::coordinator {
namespace {

std::unique_ptr<CoordinatorServer> Start() {
  JobSettings job;
  job.job_id = "job";
  job.world_size = 2;
  job.min_world_size = 2;
  job.algorithm = "spardl-bsag";
  job.density = 0.01;
  job.teams = 1;
  ServerOptions opts;
  opts.listen = "127.0.0.1:0";
  opts.token = "health-test-token-0123456789";
  auto s = CoordinatorServer::Start(job, opts);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

TEST(HealthTest, ServingWithoutTokenThenUnavailableAfterShutdown) {
  std::unique_ptr<CoordinatorServer> server = Start();
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  absl::StatusOr<ServingStatus> whole = CheckHealth(channel, "", absl::Seconds(5));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(*whole, ServingStatus::kServing);
  absl::StatusOr<ServingStatus> api = CheckHealth(channel, kHealthServiceName, absl::Seconds(5));
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_EQ(*api, ServingStatus::kServing);
  absl::StatusOr<ServingStatus> other = CheckHealth(channel, "no.such.Service", absl::Seconds(5));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound) << other.status();

  server->Shutdown();
  absl::StatusOr<ServingStatus> after = CheckHealth(channel, "", absl::Seconds(2));
  EXPECT_FALSE(after.ok() && *after == ServingStatus::kServing) << "still SERVING after Shutdown";
}

TEST(HealthTest, NobodyListeningIsAnErrorWithinTheDeadline) {
  std::unique_ptr<CoordinatorServer> server = Start();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server.reset();  // the port is closed now
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  const absl::Time t0 = absl::Now();
  absl::StatusOr<ServingStatus> st = CheckHealth(channel, "", absl::Milliseconds(500));
  EXPECT_FALSE(st.ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
}

TEST(HealthTest, CodecRoundTripsAndRejectsGarbage) {
  EXPECT_EQ(*EncodeHealthRequest(""), "");
  EXPECT_EQ(*EncodeHealthRequest("ab"), std::string("\x0a\x02"
                                                    "ab",
                                                    4));
  const std::string long_name(200, 'x');
  absl::StatusOr<std::string> enc = EncodeHealthRequest(long_name);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->substr(0, 3), std::string("\x0a\xc8\x01", 3));  // 200 as a varint
  EXPECT_EQ(enc->size(), 203u);
  EXPECT_FALSE(EncodeHealthRequest(std::string(256, 'x')).ok());

  EXPECT_EQ(*DecodeHealthResponse(""), ServingStatus::kUnknown);
  EXPECT_EQ(*DecodeHealthResponse(std::string("\x08\x01", 2)), ServingStatus::kServing);
  EXPECT_EQ(*DecodeHealthResponse(std::string("\x08\x02", 2)), ServingStatus::kNotServing);
  EXPECT_FALSE(DecodeHealthResponse(std::string("\x08\x04", 2)).ok());
  EXPECT_FALSE(DecodeHealthResponse(std::string("\x10\x01", 2)).ok());
  EXPECT_FALSE(DecodeHealthResponse(std::string("\x08\x01\x00", 3)).ok());
}

}  // namespace
}  // namespace gradex::coordinator
