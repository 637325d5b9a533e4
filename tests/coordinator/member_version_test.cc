// A member of another wire protocol is refused at Join, naming both sides'
// releases and protocols; another release of the same protocol joins, warned
// about once and counted; the coordinator's registry names its own build.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "prometheus/registry.h"
#include "services/coordinator/coordinator.h"
#include "tests/coordinator/test_job.h"
#include "version/version.h"

namespace gradex::coordinator {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);

gradex::v1::JoinRequest Versioned(const std::string& agent, int rank, const std::string& release,
                                  uint32_t protocol) {
  gradex::v1::JoinRequest r = TestJoin(agent, rank, "addr-" + agent);
  r.set_gradex_version(release);
  r.set_wire_protocol(protocol);
  return r;
}

// The value of the series of `name` whose labels include `label`=`value`
// (-1 when there is none).
double Series(prometheus::Registry& reg, const std::string& name, const std::string& label = "",
              const std::string& value = "") {
  for (const prometheus::MetricFamily& f : reg.Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      bool match = label.empty();
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == label && l.value == value) match = true;
      }
      if (!match) continue;
      return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return -1;
}

TEST(MemberVersion, OtherWireProtocolIsRefusedNamingBoth) {
  prometheus::Registry reg;
  CoordinatorMetrics metrics(reg);
  Coordinator c(TestJob(2, absl::Seconds(5)), &metrics);
  auto r = c.Join(Versioned("a", 0, "9.0.0", version::kWireProtocol + 1), t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(r.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "9.0.0")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("wire protocol ", version::kWireProtocol + 1)))
      << msg;
  EXPECT_TRUE(absl::StrContains(msg, version::Version())) << msg;
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("speaks wire protocol ", version::kWireProtocol)))
      << msg;
  EXPECT_TRUE(absl::StrContains(msg, "same gradex release")) << msg;  // the fix
  EXPECT_EQ(Series(reg, "gradex_coordinator_members", "state", "pending"), 0);
  // An older protocol than this coordinator speaks is refused the same way.
  if (version::kOldestWireProtocol > 1) {
    EXPECT_FALSE(c.Join(Versioned("b", 1, "0.0.1", version::kOldestWireProtocol - 1), t0).ok());
  }
}

TEST(MemberVersion, OtherReleaseOfTheSameProtocolJoinsAndIsCounted) {
  prometheus::Registry reg;
  CoordinatorMetrics metrics(reg);
  Coordinator c(TestJob(4, absl::Seconds(5)), &metrics);
  const std::string other = absl::StrCat(version::Version(), "-other");
  EXPECT_EQ(Series(reg, "gradex_coordinator_version_mismatch_joins_total"), 0);
  ASSERT_TRUE(c.Join(Versioned("a", 0, version::Version(), version::kWireProtocol), t0).ok());
  EXPECT_EQ(Series(reg, "gradex_coordinator_version_mismatch_joins_total"), 0);
  ASSERT_TRUE(c.Join(Versioned("b", 1, other, version::kWireProtocol), t0).ok());
  ASSERT_TRUE(c.Join(Versioned("c", 2, other, version::kWireProtocol), t0).ok());
  EXPECT_EQ(Series(reg, "gradex_coordinator_version_mismatch_joins_total"), 2);
  // A member that predates the fields (no release, protocol 0) speaks protocol 1.
  ASSERT_TRUE(c.Join(TestJoin("d", 3, "addr-d"), t0).ok());
  EXPECT_EQ(Series(reg, "gradex_coordinator_version_mismatch_joins_total"), 2);
}

TEST(MemberVersion, RegistryNamesTheBuild) {
  prometheus::Registry reg;
  CoordinatorMetrics metrics(reg);
  EXPECT_EQ(Series(reg, "gradex_build_info", "version", version::Version()), 1);
  EXPECT_EQ(Series(reg, "gradex_build_info", "git", version::GitCommit()), 1);
  EXPECT_EQ(Series(reg, "gradex_build_info", "ucx", version::BuildUcxVersion()), 1);
  EXPECT_EQ(Series(reg, "gradex_build_info", "cuda", version::BuildCudaVersion()), 1);
  EXPECT_FALSE(std::string(version::Version()).empty());
  EXPECT_TRUE(absl::StrContains(version::VersionLine("gradex-x"),
                                absl::StrCat("gradex-x ", version::Version())));
}

}  // namespace
}  // namespace gradex::coordinator
