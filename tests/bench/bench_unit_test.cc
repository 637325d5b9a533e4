// Unit tests of gradex-bench's parts: flags, gradient generator, report wire
// form, statistics and output.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "bench/flags.h"
#include "bench/gradient_gen.h"
#include "bench/output.h"
#include "bench/rank_report.h"
#include "bench/stats.h"
#include "collectives/invariants.h"
#include "gtest/gtest.h"
#include "transport/loopback_transport.h"

namespace gradex::bench {
namespace {

absl::StatusOr<BenchFlags> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "gradex-bench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

TEST(Flags, Defaults) {
  auto f = Parse({});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ranks, 4);
  EXPECT_EQ(f->teams, 2);  // divides 4
  EXPECT_EQ(f->transport, "ucx");
  auto odd = Parse({"--ranks", "3"});
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->teams, 1);
}

TEST(Flags, ParsesEveryForm) {
  auto f =
      Parse({"--algo=spardl", "--ranks",   "6",          "--elements", "1000",     "--density=0.5",
             "--teams",       "3",         "--iters",    "7",          "--warmup", "0",
             "--transport",   "loopback",  "--seed",     "42",         "--json",   "--dump",
             "/tmp/x",        "--integer", "--json-out", "/tmp/y"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->algo, "spardl");
  EXPECT_EQ(f->ranks, 6);
  EXPECT_EQ(f->elements, 1000u);
  EXPECT_DOUBLE_EQ(f->density, 0.5);
  EXPECT_EQ(f->teams, 3);
  EXPECT_EQ(f->iters, 7);
  EXPECT_EQ(f->warmup, 0);
  EXPECT_EQ(f->seed, 42u);
  EXPECT_TRUE(f->json);
  EXPECT_TRUE(f->integer);
  EXPECT_EQ(f->dump_dir, "/tmp/x");
  EXPECT_EQ(f->json_out, "/tmp/y");
}

TEST(Flags, AlgorithmParametersByCatalogName) {
  auto f = Parse({"--param", "oktopk_tau=8", "--param=kprime=100", "--quantize-bits", "4"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->params.at("oktopk_tau"), 8);
  EXPECT_EQ(f->params.at("kprime"), 100);
  EXPECT_EQ(f->params.at("quantize_bits"), 4);  // the older flag is an alias
  // Refusals name the parameter: unknown to every algorithm, out of range.
  for (const char* bad : {"nope=1", "oktopk_tau=0", "quantize_bits=3", "oktopk_tau"}) {
    auto r = Parse({"--param", bad});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string(bad).substr(0, 4)), std::string::npos)
        << r.status();
  }
}

TEST(Flags, RejectsBadInput) {
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--ranks", "0"},
           {"--ranks", "x"},
           {"--density", "1.5"},
           {"--density", "nan"},
           {"--teams", "3"},
           {"--transport", "tcp"},
           {"--nope"},
           {"--iters"},
           {"positional"},
           {"--json=1"},
           {"--fault-kill-rank", "1", "--transport", "loopback"}}) {
    EXPECT_FALSE(Parse(bad).ok()) << bad[0];
  }
}

TEST(Flags, NodesByRanksPerNodeOrByName) {
  auto d = Parse({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->ranks_per_node, 1);
  EXPECT_EQ(d->hierarchy, "auto");
  EXPECT_EQ(LayoutFor(*d).nodes(), 4);  // one rank a node: flat
  EXPECT_EQ(FlatReasonFor("spardl", *d), "one rank per node");

  auto f = Parse({"--ranks", "8", "--ranks-per-node", "4"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(NodeOfRank(*f), (std::vector<std::string>{"node0", "node0", "node0", "node0", "node1",
                                                      "node1", "node1", "node1"}));
  EXPECT_EQ(LayoutFor(*f).Describe(), "2 nodes x 4 ranks");
  EXPECT_EQ(FlatReasonFor("spardl-bsag", *f), "");
  EXPECT_NE(FlatReasonFor("covap", *f), "");  // not an inter-node stage

  auto off = Parse({"--ranks", "8", "--ranks-per-node", "4", "--hierarchy=off"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(FlatReasonFor("spardl-bsag", *off), "--hierarchy off");

  // By name, in any rank order: nodes numbered by their lowest rank.
  auto named = Parse({"--node-of-rank", "b,a,b,a"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(LayoutFor(*named).node_of, (std::vector<int>{0, 1, 0, 1}));
  auto uneven = Parse({"--ranks", "3", "--node-of-rank", "a,a,b"});
  ASSERT_TRUE(uneven.ok()) << uneven.status();
  EXPECT_NE(FlatReasonFor("spardl", *uneven).find("uneven"), std::string::npos);

  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--ranks-per-node", "3"},  // does not divide 4
           {"--ranks-per-node", "0"},
           {"--hierarchy", "on"},
           {"--node-of-rank", "a,b"},
           {"--node-of-rank", "a,,b,b"},
           {"--node-of-rank", "a,a,b,b", "--ranks-per-node", "2"}}) {
    EXPECT_EQ(Parse(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad[0];
  }
}

TEST(Flags, ResolvesAlgorithms) {
  std::vector<std::string> known = {"dense-ring", "spardl", "spardl-rsag"};
  EXPECT_EQ(*ResolveAlgorithms("all", known), known);
  auto two = ResolveAlgorithms("spardl,dense-ring,spardl", known);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<std::string>{"spardl", "dense-ring"}));
  EXPECT_FALSE(ResolveAlgorithms("gtopk", known).ok());
}

TEST(Flags, SkipsRsagWithoutPowerOfTwoTeams) {
  BenchFlags f;
  f.ranks = 6;
  f.teams = 3;
  EXPECT_FALSE(SkipReason("spardl-rsag", f).empty());
  EXPECT_TRUE(SkipReason("spardl-bsag", f).empty());
  EXPECT_EQ(TeamsFor("spardl", f), 1);
  EXPECT_EQ(TeamsFor("spardl-bsag", f), 3);
}

TEST(Flags, HelpMentionsEveryFlag) {
  std::string help = HelpText();
  for (const char* flag : {"--algo", "--ranks", "--elements", "--density", "--teams", "--iters",
                           "--warmup", "--transport", "--seed", "--json", "--dump",
                           "--ranks-per-node", "--node-of-rank", "--hierarchy"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag;
  }
}

TEST(Gradient, DeterministicWithTiesAndZeros) {
  const size_t n = 200000;
  std::vector<float> a(n), b(n), c(n), d(n);
  GenerateGradient(5, 1, 3, false, a);
  GenerateGradient(5, 1, 3, false, b);
  GenerateGradient(5, 2, 3, false, c);
  GenerateGradient(5, 1, 4, false, d);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  size_t zeros = 0;
  std::set<float> distinct;
  for (float x : a) {
    zeros += x == 0;
    distinct.insert(std::fabs(x));
  }
  EXPECT_GT(zeros, n * 4 / 100);
  EXPECT_LT(zeros, n * 6 / 100);
  EXPECT_LT(distinct.size(), n / 2);  // ties
  EXPECT_GT(distinct.size(), 1000u);
}

TEST(Gradient, IntegerMode) {
  std::vector<float> a(10000);
  GenerateGradient(1, 0, 0, true, a);
  for (float x : a) {
    EXPECT_EQ(x, std::round(x));
    EXPECT_LE(std::fabs(x), 64.0f);
  }
}

TEST(Report, RoundTrips) {
  RankAlgoReport r;
  r.rank = 3;
  r.algo = "spardl-bsag";
  r.teams = 2;
  r.error = "UNAVAILABLE: peer\tgone\n";
  r.call_s = {0.125, 1.0 / 3};
  r.selection_s = {0.01, 0.02};
  r.communication_s = {0.1, 0.2};
  r.reduction_s = {0.001, 0.002};
  r.sent_bytes = {123, 456};
  r.recv_bytes = {789, 1011};
  r.result_nnz = 250000;
  r.result_capacity = 250004;
  r.result_hash = 0xfedcba9876543210ULL;
  r.consistent = true;
  r.bounds_ok = true;
  r.conservation_checked = true;
  r.conservation_max_abs_err = 1.0 / 7;
  r.max_abs_sum = 12.5;
  r.details = {{"kprime_used", 1.0 / 3}, {"post_gather_count", 250}};
  auto back = ParseReport(SerializeReport(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->algo, r.algo);
  EXPECT_EQ(back->error, "UNAVAILABLE: peer gone ");
  EXPECT_EQ(back->call_s, r.call_s);  // exact: hex floats
  EXPECT_EQ(back->sent_bytes, r.sent_bytes);
  EXPECT_EQ(back->result_hash, r.result_hash);
  EXPECT_EQ(back->conservation_max_abs_err, r.conservation_max_abs_err);
  EXPECT_TRUE(back->consistent);
  EXPECT_EQ(back->details, r.details);  // exact: hex floats
  EXPECT_FALSE(ParseReport("garbage").ok());
}

TEST(Stats, MedianAndPercentile) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 2, 3}), 2.5);
  std::vector<double> v;
  for (int i = 1; i <= 10; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 9);
  EXPECT_DOUBLE_EQ(Percentile({5}, 0.9), 5);
}

RankAlgoReport Good(int rank, std::vector<double> times) {
  RankAlgoReport r;
  r.rank = rank;
  r.algo = "spardl";
  r.call_s = times;
  r.selection_s = r.communication_s = r.reduction_s = std::vector<double>(times.size(), 0.01);
  r.sent_bytes = r.recv_bytes = std::vector<uint64_t>(times.size(), 1000);
  r.result_nnz = 10;
  r.result_capacity = 12;
  r.result_hash = 99;
  r.consistent = r.bounds_ok = r.conservation_checked = true;
  r.max_abs_sum = 100;
  return r;
}

TEST(Stats, SlowestRankPerCall) {
  auto s = Summarize("spardl", 2, 1, {Good(0, {1, 5, 3}), Good(1, {4, 2, 3})}, true);
  ASSERT_TRUE(s.ran());
  EXPECT_DOUBLE_EQ(s.median_s, 4);  // per call max: 4, 5, 3
  EXPECT_DOUBLE_EQ(s.p90_s, 5);
  EXPECT_DOUBLE_EQ(s.sent_bytes_per_rank, 1000);
  EXPECT_TRUE(s.invariants_ok());
}

TEST(Stats, FlagsMissingRanksAndMismatches) {
  auto missing = Summarize("spardl", 3, 1, {Good(0, {1}), Good(1, {1})}, true);
  EXPECT_FALSE(missing.ran());
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_NE(missing.errors[0].find("rank 2"), std::string::npos);

  auto other = Good(1, {1});
  other.result_hash = 98;
  EXPECT_FALSE(Summarize("spardl", 2, 1, {Good(0, {1}), other}, true).consistent);

  auto lossy = Good(1, {1});
  lossy.conservation_max_abs_err = 0.5;
  EXPECT_FALSE(Summarize("spardl", 2, 1, {Good(0, {1}), lossy}, false).invariants_ok());
}

TEST(Output, JsonHasExactlyTheFields) {
  BenchFlags f;
  f.ranks = 2;
  f.elements = 1000;
  auto s = Summarize("spardl", 2, 1, {Good(0, {1e-3}), Good(1, {1e-3})}, true);
  std::string j = JsonLine(s, f);
  for (const char* k : {"algo", "ranks", "teams", "elements", "density", "iters", "median_s",
                        "p90_s", "sent_bytes_per_rank", "recv_bytes_per_rank", "result_nnz",
                        "consistent", "conservation_max_abs_err", "algbw_gbps", "busbw_gbps"}) {
    EXPECT_NE(j.find(std::string("\"") + k + "\":"), std::string::npos) << k;
  }
  size_t colons = 0;
  for (char c : j) colons += c == ':';
  EXPECT_EQ(colons, 15u);
  EXPECT_DOUBLE_EQ(AlgBwGbps(f, 1e-3), 0.004);
  EXPECT_DOUBLE_EQ(BusBwGbps(f, 1e-3), 0.004);  // 2(P-1)/P = 1 at P = 2
}

}  // namespace
}  // namespace gradex::bench

namespace gradex::bench {
namespace {

// max(err, NaN) is err, so a NaN in the result used to
// pass the conservation check as conserved.
TEST(Invariants, ANaNResultIsNotConserved) {
  std::vector<std::unique_ptr<transport::Transport>> t = transport::CreateLoopbackTransports(1);
  collectives::CallContext ctx;
  ctx.transport = t[0].get();
  ctx.job_id = 1;
  ctx.epoch = 1;
  ctx.deadline = transport::DeadlineIn(std::chrono::seconds(5));
  std::vector<float> grad = {1, 2, 3, 4}, zero(4, 0), result = {1, 2, 3, 4}, contrib(4), scratch(4);
  auto ok = collectives::CheckConservation(ctx, grad, zero, zero, result, contrib, scratch);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->max_abs_err, 0.0);
  result[0] = std::nanf("");
  ctx.call_id = 1;
  auto nan = collectives::CheckConservation(ctx, grad, zero, zero, result, contrib, scratch);
  ASSERT_TRUE(nan.ok()) << nan.status();
  EXPECT_FALSE(nan->max_abs_err <= 1e-6) << nan->max_abs_err;  // never "within tolerance"
}

TEST(Output, AlgorithmDetailsArePrintedByName) {
  BenchFlags f;
  f.ranks = 2;
  f.elements = 1000;
  RankAlgoReport a = Good(0, {1e-3}), b = Good(1, {1e-3});
  a.details = {{"kprime_used", 10}};
  b.details = {{"kprime_used", 20}};
  auto s = Summarize("spardl-bsag", 2, 1, {a, b}, true);
  const std::string j = JsonLine(s, f);
  EXPECT_NE(j.find(R"("details":{"kprime_used":15})"), std::string::npos) << j;
  const std::string t = Table({s}, f);
  EXPECT_NE(t.find("kprime_used=15"), std::string::npos) << t;
}

}  // namespace
}  // namespace gradex::bench
