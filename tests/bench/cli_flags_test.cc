// bench/cli.h, the small bench tools' flags: values in bounds are taken,
// anything else (out of bounds, not a number, an unknown word or flag, a
// missing value) is refused and leaves the default.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/cli.h"

namespace gradex::bench {
namespace {

struct Tool {
  int steps = 20;
  uint64_t elements = 100;
  double density = 0.01;
  std::string transport = "loopback";

  bool Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "tool");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseCli(static_cast<int>(argv.size()), argv.data(), "tool", "usage\n",
                    {{"--steps", IntIn(&steps, 1, 1000)},
                     {"--elements", IntIn<uint64_t>(&elements, 1, uint64_t{1} << 32)},
                     {"--density", RealIn(&density, 0, 1)},
                     {"--transport", Word(&transport, {"loopback", "ucx"})}});
  }
};

TEST(Cli, TakesValuesInBounds) {
  Tool t;
  ASSERT_TRUE(t.Parse(
      {"--steps", "1000", "--elements", "4294967296", "--density", "1", "--transport", "ucx"}));
  EXPECT_EQ(t.steps, 1000);
  EXPECT_EQ(t.elements, uint64_t{1} << 32);
  EXPECT_EQ(t.density, 1.0);
  EXPECT_EQ(t.transport, "ucx");
}

TEST(Cli, RefusesAnythingElseAndKeepsTheDefault) {
  const std::vector<std::vector<std::string>> bad = {{"--steps", "0"},
                                                     {"--steps", "1001"},
                                                     {"--steps", "ten"},
                                                     {"--steps", "5x"},
                                                     {"--elements", "4294967297"},
                                                     {"--elements", "-1"},
                                                     {"--density", "0"},
                                                     {"--density", "1.5"},
                                                     {"--density", "nan"},
                                                     {"--transport", "tcp"},
                                                     {"--transport", ""},
                                                     {"--bogus", "1"},
                                                     {"--steps"}};
  for (const auto& args : bad) {
    Tool t;
    EXPECT_FALSE(t.Parse(args)) << args[0] << " " << (args.size() > 1 ? args[1] : "");
    EXPECT_EQ(t.steps, 20);
    EXPECT_EQ(t.elements, 100u);
    EXPECT_EQ(t.density, 0.01);
    EXPECT_EQ(t.transport, "loopback");
  }
}

}  // namespace
}  // namespace gradex::bench
