// The PS worker's option table (ps/ps_option_table.h): every option is
// reachable by its C key, Python keyword and variable, its default is
// PsWorkerOptions' own, its range is enforced on every path, and keys the
// worker does not own go to the client's table.
#include "ps/ps_option_table.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "ps/ps_worker_config.h"

namespace gradex::client {
namespace {

TEST(PsOptionTable, EveryOptionHasEachFormOnce) {
  std::set<std::string> names, keys, keywords, vars;
  for (const ps::PsOptionSpec& s : ps::PsOptionTable()) {
    EXPECT_TRUE(names.insert(std::string(s.spec.name)).second) << s.spec.name;
    ASSERT_FALSE(s.spec.c_key.empty()) << s.spec.name;
    ASSERT_FALSE(s.spec.py_keyword.empty()) << s.spec.name;
    ASSERT_EQ(s.spec.env.size(), 1u) << s.spec.name;
    EXPECT_TRUE(keys.insert(std::string(s.spec.c_key)).second) << s.spec.c_key;
    EXPECT_TRUE(keywords.insert(std::string(s.spec.py_keyword)).second) << s.spec.py_keyword;
    EXPECT_TRUE(vars.insert(std::string(s.spec.env[0].name)).second) << s.spec.env[0].name;
    EXPECT_EQ(ps::FindPsCKey(s.spec.c_key), &s);
    EXPECT_EQ(ps::FindPsPyKeyword(s.spec.py_keyword), &s);
    ASSERT_NE(s.get, nullptr);
    ASSERT_NE(s.set, nullptr);
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(ps::FindPsCKey("rank"), nullptr);  // the client's
}

TEST(PsOptionTable, DefaultsAreTheStructsAndPass) {
  const ps::PsWorkerOptions d;
  EXPECT_EQ(std::get<double>(ps::FindPsCKey("density")->get(d)), 0.01);
  EXPECT_EQ(std::get<double>(ps::FindPsCKey("momentum")->get(d)), 0.9);
  EXPECT_EQ(std::get<double>(ps::FindPsCKey("weight_decay")->get(d)), 5e-4);
  EXPECT_EQ(std::get<int64_t>(ps::FindPsCKey("snapshot_interval_ms")->get(d)), 30000);
  EXPECT_TRUE(ps::CheckPsOptionValues(d).ok());
}

TEST(PsOptionTable, EachExampleRoundTripsThroughItsCKey) {
  for (const ps::PsOptionSpec& s : ps::PsOptionTable()) {
    ps::PsWorkerOptions o;
    ASSERT_TRUE(ps::SetPsFromCKey(&o, s.spec.c_key, s.spec.example).ok()) << s.spec.name;
    // Float fields print as the shortest decimal of their float.
    EXPECT_EQ(FormatValue(s.spec, s.get(o)), s.spec.example) << s.spec.name;
    EXPECT_NE(FormatValue(s.spec, s.get(ps::PsWorkerOptions{})), s.spec.example) << s.spec.name;
  }
}

TEST(PsOptionTable, OutOfRangeIsRefusedNamingTheKey) {
  const char* bad[][2] = {{"density", "0"},
                          {"density", "1.5"},
                          {"momentum", "0"},
                          {"momentum", "1.01"},
                          {"weight_decay", "-1"},
                          {"lr0", "-0.1"},
                          {"lr0", "1e39"},
                          {"server_shards", "4097"},
                          {"snapshot_interval_ms", "86400001"},
                          {"snapshot_interval_ms", "-1"},
                          {"max_staleness", "x"},
                          {"max_staleness", "4294967297"}};
  for (const auto& [key, value] : bad) {
    ps::PsWorkerOptions o;
    absl::Status s = ps::SetPsFromCKey(&o, key, value);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key << "=" << value;
    EXPECT_NE(s.message().find(key), absl::string_view::npos) << s.message();
  }
  ps::PsWorkerOptions o;
  o.momentum = 2;  // set by a C++ caller: PsWorker's check refuses it too
  o.client.world_size = 1;
  o.layer_sizes = {4};
  absl::Status s = ps::CheckPsWorkerOptions(o);
  EXPECT_NE(s.message().find("momentum"), absl::string_view::npos) << s.message();
}

TEST(PsOptionTable, OtherKeysAreTheClients) {
  ps::PsWorkerOptions o;
  ASSERT_TRUE(ps::SetPsFromCKey(&o, "world_size", "4").ok());
  EXPECT_EQ(o.client.world_size, 4);
  absl::Status s = ps::SetPsFromCKey(&o, "no_such_option", "1");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unknown option"), absl::string_view::npos) << s.message();
}

TEST(PsOptionTable, TheEnvironmentSetsAndIsChecked) {
  ASSERT_EQ(setenv("GRADEX_PS_MOMENTUM", "0.5", 1), 0);
  ASSERT_EQ(setenv("GRADEX_PS_SNAPSHOT_DIR", "/tmp/snaps", 1), 0);
  ps::PsWorkerOptions o;
  ASSERT_TRUE(ps::ApplyPsEnvironment(&o).ok());
  EXPECT_EQ(o.momentum, 0.5f);
  EXPECT_EQ(o.snapshot_dir, "/tmp/snaps");
  ASSERT_EQ(setenv("GRADEX_PS_MOMENTUM", "1.5", 1), 0);
  absl::Status s = ps::ApplyPsEnvironment(&o);
  EXPECT_NE(s.message().find("GRADEX_PS_MOMENTUM"), absl::string_view::npos) << s.message();
  ASSERT_EQ(setenv("GRADEX_PS_MOMENTUM", "much", 1), 0);
  s = ps::ApplyPsEnvironment(&o);
  EXPECT_NE(s.message().find("GRADEX_PS_MOMENTUM"), absl::string_view::npos) << s.message();
  // Empty is unset, as for the client's variables.
  ASSERT_EQ(setenv("GRADEX_PS_MOMENTUM", "", 1), 0);
  ps::PsWorkerOptions e;
  ASSERT_TRUE(ps::ApplyPsEnvironment(&e).ok());
  EXPECT_EQ(e.momentum, ps::PsWorkerOptions{}.momentum);
  unsetenv("GRADEX_PS_MOMENTUM");
  unsetenv("GRADEX_PS_SNAPSHOT_DIR");
}

TEST(PsOptionTable, TheMarkdownHasARowPerOption) {
  const std::string md = ps::PsOptionsMarkdown();
  std::vector<std::string> lines = absl::StrSplit(md, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2 + ps::PsOptionTable().size());
  for (const ps::PsOptionSpec& s : ps::PsOptionTable()) {
    EXPECT_NE(md.find(std::string(s.spec.env[0].name)), std::string::npos) << s.spec.name;
    EXPECT_NE(md.find(absl::StrCat("| `", s.spec.name, "` |")), std::string::npos) << s.spec.name;
  }
}

}  // namespace
}  // namespace gradex::client
