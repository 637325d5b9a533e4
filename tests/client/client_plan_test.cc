// No silent override, through gradex::client::Client: rank 0 embeds the coordinator
// with its options (spardl at density 0.05); a rank 1 that asks for another
// density or algorithm fails Create naming the option, both values and rank
// 0 as their source (or the coordinator's address when given by address);
// with allow_plan_override it warns once per option, counts it, and runs
// the plan's values.
#include <gtest/gtest.h>

#include <thread>

#include "services/client/client.h"
#include "services/client/embedded_coordinator.h"
#include "services/client/option_table.h"
#include "tests/client/client_harness.h"

namespace gradex::client {
namespace {

std::string Message(const absl::StatusOr<std::unique_ptr<Client>>& c) {
  return std::string(c.status().message());
}

TEST(ClientPlanTest, ARankAskingForAnotherDensityOrAlgorithmIsRefused) {
  testing::MemoryStore store;
  ClientOptions o0 = Options(0, 2);
  o0.job = "plan-refused";
  absl::StatusOr<std::unique_ptr<Client>> c0 = Client::Create(o0, store.rendezvous());
  ASSERT_TRUE(c0.ok()) << c0.status();

  ClientOptions o1 = Options(1, 2);
  o1.job = o0.job;
  ASSERT_TRUE(SetFromCKey(&o1, "density", "0.1").ok());
  absl::StatusOr<std::unique_ptr<Client>> c1 = Client::Create(o1, store.rendezvous());
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().code(), absl::StatusCode::kInvalidArgument) << c1.status();
  for (const char* want : {"density: this rank asks 0.1 (option density), the plan has 0.05",
                           "rank 0's options", "allow_plan_override"}) {
    EXPECT_NE(Message(c1).find(want), std::string::npos) << want << " in " << Message(c1);
  }

  ClientOptions o2 = Options(1, 2);
  o2.job = o0.job;
  o2.algorithm = "oktopk";  // a C++ caller's own field
  c1 = Client::Create(o2, store.rendezvous());
  ASSERT_FALSE(c1.ok());
  EXPECT_NE(Message(c1).find("algorithm: this rank asks oktopk (C++ field), the plan has spardl"),
            std::string::npos)
      << Message(c1);

  // The same coordinator by address: its job config is the source.
  absl::StatusOr<std::string> token = store.rendezvous().get(kTokenKey);
  ASSERT_TRUE(token.ok());
  ClientOptions o3 = Options(1, 2);
  o3.job = o0.job;
  ASSERT_TRUE(SetFromCKey(&o3, "coordinator", (*c0)->coordinator()).ok());
  o3.token = *token;
  ASSERT_TRUE(SetFromCKey(&o3, "teams", "2").ok());
  c1 = Client::Create(o3);
  ASSERT_FALSE(c1.ok());
  for (const std::string& want :
       {std::string("teams: this rank asks 2 (option teams), the plan has 1"),
        "the job config of the coordinator at " + (*c0)->coordinator() + " (option coordinator)"}) {
    EXPECT_NE(Message(c1).find(want), std::string::npos) << want << " in " << Message(c1);
  }
  ASSERT_TRUE((*c0)->Close().ok());
}

TEST(ClientPlanTest, AllowPlanOverrideWarnsCountsAndRunsThePlans) {
  testing::MemoryStore store;
  std::vector<std::string> stderr_of(2);
  std::vector<std::unique_ptr<Client>> clients;
  {
    // Rank 1 asks for density 0.1 and allows the plan's 0.05.
    ::testing::internal::CaptureStderr();
    clients = MakeClients(2, store, [](ClientOptions& o) {
      o.job = "plan-allowed";
      if (o.rank == 1) {
        ASSERT_TRUE(SetFromCKey(&o, "density", "0.1").ok());
        ASSERT_TRUE(SetFromCKey(&o, "allow_plan_override", "1").ok());
      }
    });
    stderr_of[0] = ::testing::internal::GetCapturedStderr();
  }
  ASSERT_EQ(clients.size(), 2u);
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  const std::string& err = stderr_of[0];
  EXPECT_NE(err.find("gradex: warning: density: this rank asks 0.1 (option density) but runs the "
                     "plan's 0.05, from rank 0's options"),
            std::string::npos)
      << err;
  size_t warnings = 0;
  for (size_t at = err.find("gradex: warning: density"); at != std::string::npos;
       at = err.find("gradex: warning: density", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << "one warning per option: " << err;
  EXPECT_EQ(Counter(*clients[1], "gradex_client_plan_overrides_total", "option", "density"), 1.0);
  EXPECT_EQ(Counter(*clients[0], "gradex_client_plan_overrides_total", "option", "density"), 0.0);
  // The job runs the plan's density on both ranks.
  std::vector<StepResult> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { results[r] = RunStep(*clients[r], r, 0, kFirstLayout); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    for (const absl::Status& s : results[r].statuses) ASSERT_TRUE(s.ok()) << "rank " << r << s;
  }
  EXPECT_EQ(results[0].spans, results[1].spans);
  for (const BucketStats& b : clients[1]->Stats()) EXPECT_EQ(b.density, 0.05) << b.algorithm;
  for (int r = 1; r >= 0; --r) ASSERT_TRUE(clients[r]->Close().ok());
}

}  // namespace
}  // namespace gradex::client
