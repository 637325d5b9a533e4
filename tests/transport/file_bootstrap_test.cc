#include "transport/file_bootstrap.h"

#include <stdlib.h>

#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace gradex {
namespace {

using std::chrono::milliseconds;

std::string TempDir() {
  char tmpl[] = "/tmp/gradex-fb-XXXXXX";
  return mkdtemp(tmpl);
}

TEST(FileBootstrapTest, GathersAllRanksOverSeveralRounds) {
  const std::string dir = TempDir();
  constexpr int kP = 4;
  std::vector<std::vector<std::string>> got(kP);
  std::vector<absl::Status> st(kP);
  std::vector<std::thread> threads;
  for (int r = 0; r < kP; ++r) {
    threads.emplace_back([&, r] {
      transport::FileBootstrap b(dir, r, kP);
      for (int round = 0; round < 2; ++round) {
        // Binary blobs with NULs survive.
        std::string mine = std::string("addr\0", 5) + std::to_string(r * 10 + round);
        auto all = b.AllGather(mine, transport::DeadlineIn(milliseconds(5000)));
        if (!all.ok()) {
          st[r] = all.status();
          return;
        }
        for (int p = 0; p < kP; ++p) {
          if ((*all)[p] != std::string("addr\0", 5) + std::to_string(p * 10 + round)) {
            st[r] = absl::InternalError("wrong blob");
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kP; ++r) EXPECT_TRUE(st[r].ok()) << st[r];
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank-0.addr"));
  std::filesystem::remove_all(dir);
}

TEST(FileBootstrapTest, TimeoutNamesMissingRanks) {
  const std::string dir = TempDir();
  transport::FileBootstrap b(dir, 1, 4);
  auto start = transport::Clock::now();
  auto all = b.AllGather("x", transport::DeadlineIn(milliseconds(200)));
  EXPECT_LT(transport::Clock::now() - start, milliseconds(1000));
  ASSERT_TRUE(absl::IsDeadlineExceeded(all.status())) << all.status();
  EXPECT_TRUE(absl::StrContains(all.status().message(), "0,2,3")) << all.status();
  std::filesystem::remove_all(dir);
}

TEST(FileBootstrapTest, BadDirectoryIsAnError) {
  transport::FileBootstrap b("/nonexistent/gradex", 0, 2);
  EXPECT_FALSE(b.AllGather("x", transport::DeadlineIn(milliseconds(100))).ok());
}

}  // namespace
}  // namespace gradex
