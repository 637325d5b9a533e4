// plan_override.h's pure part: which asked options differ from the plan a
// rank joins, and the message that names the option, both values and where
// the plan's came from.
#include "services/client/plan_override.h"

#include <gtest/gtest.h>

#include "services/client/option_table.h"

namespace gradex::client {
namespace {

member::JobPlanConfig Plan(const std::string& algorithm, double density, int teams = 1) {
  member::JobPlanConfig p;
  p.algorithm = algorithm;
  p.density = density;
  p.teams = teams;
  return p;
}

TEST(PlanOverrideTest, NothingAskedNothingDiffers) {
  EXPECT_TRUE(FindPlanOverrides(ClientOptions{}, Plan("oktopk", 0.001, 4)).empty());
  // Asked, and the same as the plan's.
  ClientOptions o;
  ASSERT_TRUE(SetFromCKey(&o, "algorithm", "oktopk").ok());
  ASSERT_TRUE(SetFromCKey(&o, "density", "0.001").ok());
  ASSERT_TRUE(SetFromCKey(&o, "teams", "4").ok());
  EXPECT_TRUE(FindPlanOverrides(o, Plan("oktopk", 0.001, 4)).empty());
  // Options the plan does not decide never differ from it.
  ASSERT_TRUE(SetFromCKey(&o, "start_iter", "9").ok());
  EXPECT_TRUE(FindPlanOverrides(o, Plan("oktopk", 0.001, 4)).empty());
}

TEST(PlanOverrideTest, AnExplicitDefaultAsksForIt) {
  ClientOptions o;
  ASSERT_TRUE(SetFromCKey(&o, "density", "0.01").ok());  // the default, given
  std::vector<PlanOverride> v = FindPlanOverrides(o, Plan("spardl", 0.05));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].option, "density");
  EXPECT_EQ(v[0].asked, "0.01");
  EXPECT_EQ(v[0].plan, "0.05");
  EXPECT_EQ(v[0].where, "option density");
}

TEST(PlanOverrideTest, EachOptionAndBothValuesAndTheSourceAreNamed) {
  ClientOptions o;
  o.algorithm = "oktopk";  // a C++ caller's field, not the default: asked
  o.given["density"] = "keyword density";
  o.density = 0.001;
  std::vector<PlanOverride> v = FindPlanOverrides(o, Plan("spardl-bsag", 0.01));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].option, "algorithm");
  EXPECT_EQ(v[0].asked, "oktopk");
  EXPECT_EQ(v[0].where, "C++ field");
  EXPECT_EQ(v[0].plan, "spardl-bsag");
  EXPECT_EQ(v[1].option, "density");
  const std::string source = "the job config of the coordinator at gx:50051 (GRADEX_COORDINATOR)";
  absl::Status s = PlanOverrideError(v, source);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  const std::string m(s.message());
  for (const char* want :
       {"algorithm: this rank asks oktopk (C++ field), the plan has spardl-bsag",
        "density: this rank asks 0.001 (keyword density), the plan has 0.01", source.c_str(),
        "allow_plan_override=True", "GRADEX_ALLOW_PLAN_OVERRIDE=1"}) {
    EXPECT_NE(m.find(want), std::string::npos) << want << " in " << m;
  }
  const std::string w = PlanOverrideWarning(v[1], source);
  EXPECT_NE(w.find("density"), std::string::npos) << w;
  EXPECT_NE(w.find("0.001"), std::string::npos) << w;
  EXPECT_NE(w.find("runs the plan's 0.01"), std::string::npos) << w;
}

TEST(PlanOverrideTest, TeamsZeroLeavesTheCountToTheCoordinator) {
  ClientOptions o;
  ASSERT_TRUE(SetFromCKey(&o, "teams", "0").ok());
  EXPECT_TRUE(FindPlanOverrides(o, Plan("spardl-bsag", 0.01, 4)).empty());
  ASSERT_TRUE(SetFromCKey(&o, "teams", "2").ok());
  std::vector<PlanOverride> v = FindPlanOverrides(o, Plan("spardl-bsag", 0.01, 4));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].plan, "4");
  member::JobPlanConfig chosen = Plan("spardl-bsag", 0.01, 2);
  chosen.auto_teams = true;  // 2 today, the coordinator's choice tomorrow
  v = FindPlanOverrides(o, chosen);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].plan.find("auto_teams"), std::string::npos) << v[0].plan;
}

TEST(PlanOverrideTest, ParametersAgainstTheJobConfigOrTheCatalogDefault) {
  ClientOptions o;
  ASSERT_TRUE(SetFromCKey(&o, "param.oktopk_tau", "64").ok());  // oktopk's default
  EXPECT_TRUE(FindPlanOverrides(o, Plan("oktopk", 0.01)).empty());
  EXPECT_TRUE(FindPlanOverrides(o, Plan("auto", 0.01)).empty()) << "auto: any algorithm's default";
  member::JobPlanConfig set = Plan("oktopk", 0.01);
  set.params["oktopk_tau"] = 32;
  std::vector<PlanOverride> v = FindPlanOverrides(o, set);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].option, "params.oktopk_tau");
  EXPECT_EQ(v[0].asked, "64");
  EXPECT_EQ(v[0].plan, "32");
  ASSERT_TRUE(SetFromCKey(&o, "param.oktopk_tau", "16").ok());
  v = FindPlanOverrides(o, Plan("oktopk", 0.01));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].plan.find("64 (the catalog's default"), std::string::npos) << v[0].plan;
  // A parameter the plan's algorithm does not have is not run at all.
  v = FindPlanOverrides(o, Plan("spardl", 0.01));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].plan.find("spardl has no such parameter"), std::string::npos) << v[0].plan;
}

TEST(PlanOverrideTest, TheSourceSaysWhereThePlanComesFrom) {
  ClientOptions o;
  o.rank = 1;
  EXPECT_NE(PlanSource(o, "10.0.0.1:4000").find("rank 0's options"), std::string::npos);
  o.coordinator = "gx:50051";
  o.given["coordinator"] = "GRADEX_COORDINATOR";
  const std::string s = PlanSource(o, "gx:50051");
  EXPECT_NE(s.find("the job config of the coordinator at gx:50051"), std::string::npos) << s;
  EXPECT_NE(s.find("GRADEX_COORDINATOR"), std::string::npos) << s;
}

TEST(PlanOverrideTest, UnknownPlanConfigChecksNothing) {
  ClientOptions o;
  o.density = 0.5;
  prometheus::Registry registry;
  EXPECT_TRUE(CheckPlanOverrides(o, std::nullopt, "a:1", registry).ok());
  EXPECT_FALSE(CheckPlanOverrides(o, Plan("spardl", 0.01), "a:1", registry).ok());
}

}  // namespace
}  // namespace gradex::client
