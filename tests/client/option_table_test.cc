// The option table (services/client/option_table.h): every option through
// the C ABI's keys and through its environment variables lands in its own
// ClientOptions member (read here by hand, not through the table) with the
// table's example value, and nowhere else; values out of range are refused
// naming the key or variable and the range. (tests/python/option_table_test.py
// does the same through the Python keywords.)
#include "services/client/option_table.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/client/client.h"

namespace gradex::client {
namespace {

// Every member, by its name, independently of the table: a table row wired
// to the wrong member shows as a change in another member.
std::map<std::string, std::string> Fields(const ClientOptions& o) {
  std::vector<std::string> params;
  for (const auto& [k, v] : o.params) params.push_back(absl::StrCat(k, "=", FormatNumber(v)));
  return {
      {"job", o.job},
      {"rank", absl::StrCat(o.rank)},
      {"world_size", absl::StrCat(o.world_size)},
      {"local_rank", absl::StrCat(o.local_rank)},
      {"coordinator", o.coordinator},
      {"token", o.token},
      {"advertise_host", o.advertise_host},
      {"algorithm", o.algorithm},
      {"density", FormatNumber(o.density)},
      {"teams", absl::StrCat(o.teams)},
      {"params", absl::StrJoin(params, ",")},
      {"start_iter", absl::StrCat(o.start_iter)},
      {"min_compression_rate", FormatNumber(o.min_compression_rate)},
      {"dense_probe_period", absl::StrCat(o.dense_probe_period)},
      {"max_bucket_elements", absl::StrCat(o.max_bucket_elements)},
      {"timeout", absl::StrCat(o.timeout.count())},
      {"mean", o.mean ? "1" : "0"},
      {"metrics_port", absl::StrCat(o.metrics_port)},
      {"metrics_address", o.metrics_address},
      {"tls_ca", o.tls_ca},
      {"tls_client_cert", o.tls_client_cert},
      {"tls_client_key", o.tls_client_key},
      {"tls_server_name", o.tls_server_name},
      {"data_ip", o.data_ip},
      {"timeline_path", o.timeline_path},
      {"refuse_nonfinite", o.refuse_nonfinite ? "1" : "0"},
      {"hierarchy", o.hierarchy},
      {"node", o.node},
      {"pipeline", o.pipeline ? "1" : "0"},
      {"momentum_correction", FormatNumber(o.momentum_correction)},
      {"factor_masking", o.factor_masking ? "1" : "0"},
      {"allow_plan_override", o.allow_plan_override ? "1" : "0"},
  };
}

// The members that differ from `base`.
std::set<std::string> Changed(const ClientOptions& base, const ClientOptions& o) {
  std::set<std::string> out;
  const auto a = Fields(base), b = Fields(o);
  for (const auto& [name, value] : a) {
    if (b.at(name) != value) out.insert(name);
  }
  return out;
}

void ClearEnvironment() {
  for (const OptionSpec& s : OptionTable()) {
    for (const OptionEnv& e : s.env) unsetenv(std::string(e.name).c_str());
  }
}

class OptionTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearEnvironment(); }
  void TearDown() override { ClearEnvironment(); }
};

TEST_F(OptionTableTest, EveryMemberHasOneRowAndEveryRowIsComplete) {
  std::set<std::string> rows;
  for (const OptionSpec& s : OptionTable()) {
    EXPECT_TRUE(rows.insert(std::string(s.name)).second) << s.name << " twice";
    EXPECT_TRUE(Fields(ClientOptions{}).contains(std::string(s.name))) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_FALSE(s.c_key.empty() && s.py_keyword.empty() && s.env.empty())
        << s.name << ": no way to set it";
    // The example is valid and not the default, so the round trips show it.
    absl::StatusOr<OptionValue> v = ParseOptionText(s, s.example);
    if (s.type == OptionType::kParams) v = ParseOptionText(s, s.example);
    ASSERT_TRUE(v.ok()) << s.name << ": " << v.status();
    EXPECT_TRUE(CheckOptionValue(s, *v, s.name).ok()) << s.name;
    EXPECT_NE(FormatValue(s, *v), DefaultText(s)) << s.name;
    EXPECT_EQ(FormatValue(s, *v), s.example) << s.name << ": the example is in canonical form";
    EXPECT_EQ(s.plan_decided, !s.job_field.empty()) << s.name;
  }
  for (const auto& [name, value] : Fields(ClientOptions{})) {
    EXPECT_TRUE(rows.contains(name)) << "ClientOptions::" << name << " has no row";
  }
  EXPECT_TRUE(CheckOptionValues(ClientOptions{}).ok()) << "the defaults are valid";
  std::set<std::string> plan;
  for (const OptionSpec& s : OptionTable()) {
    if (s.plan_decided) plan.insert(std::string(s.name));
  }
  EXPECT_EQ(plan, (std::set<std::string>{"algorithm", "density", "teams", "params"}));
}

TEST_F(OptionTableTest, EveryCKeyLandsInItsMember) {
  int keys = 0;
  for (const OptionSpec& s : OptionTable()) {
    if (s.c_key.empty()) continue;
    ++keys;
    std::string key(s.c_key), value(s.example);
    if (s.type == OptionType::kParams) {  // param.NAME=VALUE, one per key
      const size_t eq = value.find('=');
      key = absl::StrCat(s.c_key, value.substr(0, eq));
      value = value.substr(eq + 1);
    }
    ClientOptions o;
    ASSERT_TRUE(SetFromCKey(&o, key, value).ok()) << key << "=" << value;
    EXPECT_EQ(Changed(ClientOptions{}, o), std::set<std::string>{std::string(s.name)}) << key;
    EXPECT_EQ(Fields(o)[std::string(s.name)], s.example) << key;
    EXPECT_EQ(o.given[std::string(s.name)], absl::StrCat("option ", key));
  }
  EXPECT_GE(keys, 25);
  ClientOptions o;
  absl::Status s = SetFromCKey(&o, "no_such_option", "1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no_such_option"), std::string::npos) << s;
  EXPECT_NE(s.message().find("density"), std::string::npos) << "lists the known keys: " << s;
}

TEST_F(OptionTableTest, EveryEnvironmentVariableLandsInItsMember) {
  int vars = 0;
  for (const OptionSpec& s : OptionTable()) {
    for (const OptionEnv& e : s.env) {
      ++vars;
      ClearEnvironment();
      const std::string name(e.name);
      if (e.kind == EnvKind::kValue) {
        setenv(name.c_str(), std::string(s.example).c_str(), 1);
      } else {
        const std::string path = ::testing::TempDir() + "/gradex_option_" + name;
        // A token file's surrounding whitespace is not the token's.
        std::ofstream(path) << (e.kind == EnvKind::kTrimmedFile ? " " : "") << s.example
                            << (e.kind == EnvKind::kTrimmedFile ? "\n" : "");
        setenv(name.c_str(), path.c_str(), 1);
      }
      ClientOptions base;
      base.world_size = 65536;  // RANK is checked against it
      if (s.name == "world_size") base = ClientOptions{};
      ClientOptions o = base;
      absl::Status st = ApplyEnvironment(&o);
      ASSERT_TRUE(st.ok()) << name << ": " << st;
      EXPECT_EQ(Changed(base, o), std::set<std::string>{std::string(s.name)}) << name;
      EXPECT_EQ(Fields(o)[std::string(s.name)], s.example) << name;
      EXPECT_EQ(o.given[std::string(s.name)], name);
    }
  }
  EXPECT_EQ(vars, 21)
      << "the 18 variables of before, GRADEX_ALLOW_PLAN_OVERRIDE, GRADEX_HIERARCHY and "
         "GRADEX_NODE";
  // The first variable listed wins.
  ClearEnvironment();
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  setenv("GRADEX_COORDINATOR_HOST", "node0", 1);
  ClientOptions o;
  ASSERT_TRUE(ApplyEnvironment(&o).ok());
  EXPECT_EQ(o.advertise_host, "node0");
}

// A value just outside each range (or the excluded end itself).
std::vector<std::string> OutOfRange(const OptionSpec& s) {
  const OptionRange& r = *s.range;
  std::vector<std::string> out;
  out.push_back(FormatNumber(r.lo_open ? r.lo : r.lo - 1));
  out.push_back(FormatNumber(r.hi_open ? r.hi : r.hi + 1));
  return out;
}

TEST_F(OptionTableTest, OutOfRangeIsRefusedNamingTheOptionAndItsRange) {
  int checked = 0;
  for (const OptionSpec& s : OptionTable()) {
    if (!s.range) continue;
    const std::string range = ExpectedText(s);
    EXPECT_NE(range.find(s.range->lo_open ? "(" : "["), std::string::npos) << range;
    for (const std::string& bad : OutOfRange(s)) {
      ++checked;
      if (!s.c_key.empty()) {
        ClientOptions o;
        absl::Status st = SetFromCKey(&o, s.c_key, bad);
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << s.c_key << "=" << bad;
        EXPECT_NE(st.message().find(s.c_key), std::string::npos) << st;
        // Text that does not even parse as the type still names the range.
        EXPECT_NE(st.message().find(range), std::string::npos) << st;
        EXPECT_EQ(Fields(o), Fields(ClientOptions{})) << "a refused value changes nothing";
      }
      for (const OptionEnv& e : s.env) {
        ClearEnvironment();
        setenv(std::string(e.name).c_str(), bad.c_str(), 1);
        ClientOptions o;
        absl::Status st = ApplyEnvironment(&o);
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << e.name << "=" << bad;
        EXPECT_NE(st.message().find(e.name), std::string::npos) << st;
        EXPECT_NE(st.message().find(range), std::string::npos) << st;
      }
      // A C++ caller's field: Create's check names the option.
      ClientOptions o;
      absl::StatusOr<OptionValue> v = ParseOptionText(s, bad);
      if (!v.ok()) continue;  // -1 for an unsigned field: a C++ caller cannot write it
      s.set(&o, *v);
      absl::Status st = CheckOptionValues(o);
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << s.name << "=" << bad;
      EXPECT_NE(st.message().find(s.name), std::string::npos) << st;
      EXPECT_NE(st.message().find(range), std::string::npos) << st;
    }
  }
  EXPECT_GE(checked, 2 * 10);
  // density's range is the table's: (0, 1].
  const OptionSpec* density = FindOption("density");
  ASSERT_NE(density, nullptr);
  EXPECT_EQ(ExpectedText(*density), "a number in (0, 1]");
  EXPECT_EQ(ExpectedText(*FindOption("momentum_correction")), "a number in [0, 1)");
  ClientOptions o;
  absl::Status st = SetFromCKey(&o, "density", "0");
  EXPECT_EQ(st.message(), "option density='0': expected a number in (0, 1]");
}

TEST_F(OptionTableTest, StringsAreCheckedByTheirRule) {
  for (auto [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"job", "a/b"},
                                                        {"coordinator", "nohost"},
                                                        {"algorithm", "no-such-algorithm"},
                                                        {"advertise_host", "a b"}}) {
    ClientOptions o;
    absl::Status st = SetFromCKey(&o, key, value);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_NE(st.message().find(key), std::string::npos) << st;
    EXPECT_NE(st.message().find(ExpectedText(*FindCKey(key))), std::string::npos) << st;
  }
}

// start_iter not given: auto's timed warm-up where dense probes are on, 0
// otherwise; given (even as 0), the value given.
TEST_F(OptionTableTest, StartIterNotGivenIsAutosWarmUpWhereProbesAreOn) {
  ClientOptions o;
  ApplyDependentDefaults(&o);
  EXPECT_EQ(o.start_iter, kAutoWarmupSteps);
  ClientOptions named;
  ASSERT_TRUE(SetFromCKey(&named, "algorithm", "spardl").ok());
  ApplyDependentDefaults(&named);
  EXPECT_EQ(named.start_iter, 0u);
  ClientOptions no_probes;
  ASSERT_TRUE(SetFromCKey(&no_probes, "dense_probe_period", "0").ok());
  ApplyDependentDefaults(&no_probes);
  EXPECT_EQ(no_probes.start_iter, 0u);
  ClientOptions given;
  ASSERT_TRUE(SetFromCKey(&given, "start_iter", "0").ok());
  ApplyDependentDefaults(&given);
  EXPECT_EQ(given.start_iter, 0u);
  ASSERT_TRUE(SetFromCKey(&given, "start_iter", "7").ok());
  ApplyDependentDefaults(&given);
  EXPECT_EQ(given.start_iter, 7u);
}

TEST_F(OptionTableTest, TheReadmeTableHasARowPerOption) {
  const std::string md = OptionsMarkdown();
  for (const OptionSpec& s : OptionTable()) {
    EXPECT_NE(md.find(absl::StrCat("| `", s.name, "` |")), std::string::npos) << s.name;
    for (const OptionEnv& e : s.env)
      EXPECT_NE(md.find(std::string(e.name)), std::string::npos) << e.name;
  }
}

}  // namespace
}  // namespace gradex::client
