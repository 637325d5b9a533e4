// Ranks per pod: torchrun's processes of one node share the environment but
// for LOCAL_RANK, and each serves its own metrics on GRADEX_METRICS_PORT +
// LOCAL_RANK. Four clients of one process, each given the environment of one
// local rank, bind four ports, and each port serves a client's registry.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/client/client.h"
#include "services/client/client_impl.h"
#include "tests/client/client_harness.h"
#include "tests/coordinator/client_util.h"

namespace gradex::client {
namespace {

// Whether 127.0.0.1:port can be bound now.
bool Free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A base with n free ports after it (from the ephemeral range's far end,
// where the kernel hands out fewest).
int FreeBase(int n) {
  for (int base = 60000; base + n < 65000; base += n) {
    bool all = true;
    for (int i = 0; i < n && all; ++i) all = Free(base + i);
    if (all) return base;
  }
  return -1;
}

TEST(MetricsPorts, BaseAndLocalRank) {
  ClientOptions o;
  o.metrics_port = 9400;
  o.local_rank = 3;
  EXPECT_EQ(MetricsPortOf(o), 9403);
  EXPECT_TRUE(CheckMetricsPort(o).ok());
  o.metrics_port = 0;  // any free port, for every rank
  EXPECT_EQ(MetricsPortOf(o), 0);
  o.metrics_port = -1;
  EXPECT_EQ(MetricsPortOf(o), -1);
  o.metrics_port = 65534;
  o.local_rank = 1;
  EXPECT_TRUE(CheckMetricsPort(o).ok());
  o.local_rank = 2;
  const absl::Status s = CheckMetricsPort(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("GRADEX_METRICS_PORT + LOCAL_RANK"), std::string::npos) << s;
  o.metrics_port = 65536;
  o.local_rank = 0;
  EXPECT_FALSE(CheckMetricsPort(o).ok());
}

TEST(MetricsPorts, FourLocalRanksBindFourPorts) {
  constexpr int kWorld = 4;
  const int base = FreeBase(kWorld);
  ASSERT_GT(base, 0) << "no " << kWorld << " consecutive free ports";
  // The environment torchrun gives each process of one node.
  std::vector<ClientOptions> opts;
  for (int r = 0; r < kWorld; ++r) {
    ClientOptions o = Options(r, kWorld);
    setenv("GRADEX_METRICS_PORT", std::to_string(base).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
    ASSERT_TRUE(ApplyEnvironment(&o).ok());
    opts.push_back(o);
  }
  unsetenv("GRADEX_METRICS_PORT");
  unsetenv("LOCAL_RANK");
  testing::MemoryStore store;
  auto clients = MakeClients(kWorld, store, [&](ClientOptions& o) { o = opts[o.rank]; });
  std::set<int> ports;
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_NE(clients[r], nullptr);
    const auto& impl = dynamic_cast<const ClientImpl&>(*clients[r]);
    EXPECT_EQ(impl.metrics().port(), base + r) << "local rank " << r;
    ports.insert(impl.metrics().port());
    const std::string body = coordinator::HttpGet(base + r, "/metrics");
    EXPECT_NE(body.find("gradex_agent_steps_total"), std::string::npos)
        << "port " << base + r << ": " << body.substr(0, 200);
  }
  EXPECT_EQ(ports.size(), static_cast<size_t>(kWorld));
  // A fifth process of the node with a local rank already served fails
  // naming both variables, instead of silently serving nothing.
  ClientOptions dup = Options(0, 1);
  dup.job = "metrics-ports-dup";
  dup.metrics_port = base;
  dup.local_rank = 2;
  testing::MemoryStore store2;
  absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(dup, store2.rendezvous());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.status().message().find(absl::StrCat("GRADEX_METRICS_PORT ", base, " + LOCAL_RANK 2")),
      std::string::npos)
      << c.status();
  // Rank 0 (the embedded coordinator) last, so the others' leaves are confirmed.
  std::vector<std::thread> closing;
  for (int r = 1; r < kWorld; ++r) closing.emplace_back([&, r] { clients[r].reset(); });
  for (auto& t : closing) t.join();
  clients[0].reset();
}

}  // namespace
}  // namespace gradex::client
