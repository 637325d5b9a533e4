// gradex-sim's node model (bench/sim/node_model.h): the hierarchical
// exchange's closed form against the flat one and NCCL's hierarchical dense
// ring. Every check is arithmetic, so exact or within a stated bound:
//  - one rank a node (L = 1) is the flat exchange, exactly;
//  - the bytes leaving a node in the hierarchical exchange are one rank's
//    flat bytes over the N nodes for the whole bucket (the shards' L
//    exchanges add up to one), within the shard's rounding ceil(n/L);
//  - the flat exchange puts L ranks' bytes on the NIC (dense-ring one);
//  - a hand-computed 2 x 2 case, stage by stage;
//  - the hierarchical dense-ring is NCCL's hierarchical dense ring;
//  - the flags.
#include <cmath>
#include <string>
#include <vector>

#include "bench/sim/cost_model.h"
#include "bench/sim/node_model.h"
#include "bench/sim/node_report.h"
#include "bench/sim/sim_flags.h"
#include "gtest/gtest.h"

namespace gradex::sim {
namespace {

constexpr double kDensity = 0.01;

NodeNetwork Net(int nodes, int per_node, double gbit) {
  NodeNetwork net;
  net.nodes = nodes;
  net.ranks_per_node = per_node;
  net.beta = 8 / (gbit * 1e9);
  return net;
}

// The SAG rows need T dividing P; 2 divides every world below.
int Teams(const std::string& algo) {
  return algo == "spardl-rsag" || algo == "spardl-bsag" ? 2 : 1;
}

TEST(SimNodeModel, CoversTheCatalogsHierarchicalAlgorithms) {
  const std::vector<std::string> names = NodeModelNames();
  auto has = [&](const char* n) {
    for (const std::string& s : names) {
      if (s == n) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("spardl"));
  EXPECT_TRUE(has("oktopk"));
  EXPECT_TRUE(has("topka"));
  EXPECT_TRUE(has("dense-ring"));
  EXPECT_FALSE(has("covap"));  // decays a residual the hierarchy would keep per node
  EXPECT_FALSE(has("dgs"));    // a parameter server, no Table 1 row
}

TEST(SimNodeModel, OneRankANodeIsTheFlatExchangeExactly) {
  for (const std::string& algo : NodeModelNames()) {
    for (int p : {4, 16, 1024}) {
      SCOPED_TRACE(algo + " P=" + std::to_string(p));
      const NodeNetwork net = Net(p, 1, 25);
      const int t = Teams(algo);
      absl::StatusOr<ExchangeCost> flat = FlatCost(algo, net, 25'000'000, kDensity, t);
      absl::StatusOr<ExchangeCost> hier = HierarchicalCost(algo, net, 25'000'000, kDensity, t);
      ASSERT_TRUE(flat.ok() && hier.ok());
      EXPECT_EQ(hier->lo_s(), flat->lo_s());
      EXPECT_EQ(hier->hi_s(), flat->hi_s());
      EXPECT_EQ(hier->inter.nic_bytes_lo, flat->inter.nic_bytes_lo);
      EXPECT_EQ(hier->inter.nic_bytes_hi, flat->inter.nic_bytes_hi);
      EXPECT_EQ(hier->reduce_scatter.hi_s, 0);
      EXPECT_EQ(hier->all_gather.hi_s, 0);
      EXPECT_EQ(hier->reduce_scatter.link_bytes_hi + hier->all_gather.link_bytes_hi, 0);
    }
  }
}

// Bytes leaving a node: L shards of n/L at density d across N nodes make one
// rank's exchange of n across N. ceil(n/L) adds at most L-1 elements to the
// L shards, a relative (L-1)/n.
TEST(SimNodeModel, NodeBytesAreOneRanksFlatBytesOverTheNodes) {
  for (const std::string& algo : NodeModelNames()) {
    for (uint64_t n : {uint64_t{25'000'000}, uint64_t{25'000'003}}) {
      for (int per_node : {2, 4, 8}) {
        SCOPED_TRACE(algo + " n=" + std::to_string(n) + " L=" + std::to_string(per_node));
        const NodeNetwork net = Net(128, per_node, 10);
        const int t = Teams(algo);
        absl::StatusOr<ExchangeCost> hier = HierarchicalCost(algo, net, n, kDensity, t);
        absl::StatusOr<CostRange> one = Table1Cost(algo, 128, n, kDensity, t);
        ASSERT_TRUE(hier.ok() && one.ok());
        const double bound = (n % per_node == 0 ? 0 : (per_node - 1.0) / n) + 1e-12;
        EXPECT_NEAR(hier->inter.nic_bytes_lo / one->bytes_lo, 1.0, bound);
        EXPECT_NEAR(hier->inter.nic_bytes_hi / one->bytes_hi, 1.0, bound);
        EXPECT_GE(hier->inter.nic_bytes_hi, one->bytes_hi * (1 - 1e-12));  // never below
      }
    }
  }
}

TEST(SimNodeModel, FlatNicCarriesEveryRanksBytesButARings) {
  const NodeNetwork net = Net(128, 8, 10);
  absl::StatusOr<ExchangeCost> spardl = FlatCost("spardl", net, 25'000'000, kDensity, 1);
  absl::StatusOr<CostRange> spardl_rank = Table1Cost("spardl", 1024, 25'000'000, kDensity, 1);
  absl::StatusOr<ExchangeCost> ring = FlatCost("dense-ring", net, 25'000'000, kDensity, 1);
  absl::StatusOr<CostRange> ring_rank = Table1Cost("dense-ring", 1024, 25'000'000, kDensity, 1);
  ASSERT_TRUE(spardl.ok() && spardl_rank.ok() && ring.ok() && ring_rank.ok());
  EXPECT_EQ(spardl->inter.nic_bytes_hi, 8 * spardl_rank->bytes_hi);
  EXPECT_EQ(ring->inter.nic_bytes_hi, ring_rank->bytes_hi);
  // The hierarchy divides spardl's node bytes by L·(N-1)/N·P/(P-1) = 8.05.
  absl::StatusOr<ExchangeCost> hier = HierarchicalCost("spardl", net, 25'000'000, kDensity, 1);
  ASSERT_TRUE(hier.ok());
  EXPECT_NEAR(spardl->inter.nic_bytes_hi / hier->inter.nic_bytes_hi, 8.0 * 1023 / 1024 * 128 / 127,
              1e-9);
}

// spardl on 2 nodes x 2 ranks, n = 1000, d = 0.1 (k = 100), α = 1, β = 1,
// α_i = 1/4, β_i = 1/8, by hand from Table 1's row 2 log2(P)α + 2·8k(P-1)/P β.
TEST(SimNodeModel, TwoByTwoSpardlByHand) {
  NodeNetwork net;
  net.nodes = 2;
  net.ranks_per_node = 2;
  net.alpha = 1;
  net.beta = 1;
  net.intra_alpha = 0.25;
  net.intra_beta = 0.125;
  absl::StatusOr<ExchangeCost> flat = FlatCost("spardl", net, 1000, 0.1, 1);
  ASSERT_TRUE(flat.ok());
  // P = 4: 4 messages; 2·8·100·3/4 = 1200 B a rank, 2400 B on the NIC.
  EXPECT_DOUBLE_EQ(flat->inter.nic_bytes_hi, 2400);
  EXPECT_DOUBLE_EQ(flat->hi_s(), 4 + 2400);
  absl::StatusOr<ExchangeCost> hier = HierarchicalCost("spardl", net, 1000, 0.1, 1);
  ASSERT_TRUE(hier.ok());
  // Shard 500 (k = 50): reduce-scatter one message of 2000 B.
  EXPECT_DOUBLE_EQ(hier->reduce_scatter.hi_s, 0.25 + 2000 * 0.125);
  EXPECT_DOUBLE_EQ(hier->reduce_scatter.link_bytes_hi, 2000);
  // N = 2: 2 messages; 2·8·50·1/2 = 400 B a rank, 800 B on the NIC.
  EXPECT_DOUBLE_EQ(hier->inter.nic_bytes_hi, 800);
  EXPECT_DOUBLE_EQ(hier->inter.hi_s, 2 + 800);
  // spardl cuts its result to k: 50 entries, 400 B, to the other rank.
  EXPECT_DOUBLE_EQ(hier->all_gather.hi_s, 0.25 + 400 * 0.125);
  EXPECT_DOUBLE_EQ(hier->hi_s(), 250.25 + 802 + 50.25);
}

TEST(SimNodeModel, HierarchicalDenseRingIsNcclsHierarchicalRing) {
  for (int gbit : {10, 100}) {
    const NodeNetwork net = Net(128, 8, gbit);
    const ExchangeCost nccl = NcclHierarchicalDenseCost(net, 100'000'000);
    absl::StatusOr<ExchangeCost> ring = HierarchicalCost("dense-ring", net, 100'000'000, 1, 1);
    ASSERT_TRUE(ring.ok());
    EXPECT_DOUBLE_EQ(ring->hi_s(), nccl.hi_s());
    EXPECT_DOUBLE_EQ(ring->all_gather.hi_s, nccl.all_gather.hi_s);
    // 2(N-1)/N · (n/L) · 4 bytes a local rank, L of them on the NIC.
    EXPECT_DOUBLE_EQ(nccl.inter.nic_bytes_hi, 8 * 2.0 * 127 / 128 * (100'000'000 / 8) * 4);
    EXPECT_DOUBLE_EQ(nccl.inter.messages, 2 * 127);
  }
}

// The closed form at the configuration the docs report (P = 1024 as 128 x 8,
// NVLink 300 GB/s, α = 20 µs): the hierarchy's step under 0.6 of the flat
// one for spardl at 10 and 100 Gbit/s and both bucket sizes, and the
// bucket's dense ring between nodes slower than both.
TEST(SimNodeModel, SpardlHierarchyAtOneThousandRanks) {
  for (int gbit : {10, 100}) {
    for (uint64_t n : {uint64_t{25'000'000}, uint64_t{100'000'000}}) {
      SCOPED_TRACE(std::to_string(gbit) + " Gbit/s n=" + std::to_string(n));
      const NodeNetwork net = Net(128, 8, gbit);
      absl::StatusOr<ExchangeCost> flat = FlatCost("spardl", net, n, kDensity, 1);
      absl::StatusOr<ExchangeCost> hier = HierarchicalCost("spardl", net, n, kDensity, 1);
      ASSERT_TRUE(flat.ok() && hier.ok());
      EXPECT_LT(hier->hi_s(), 0.6 * flat->hi_s());
      EXPECT_LT(flat->hi_s(), NcclHierarchicalDenseCost(net, n).hi_s());
    }
  }
}

TEST(SimNodeModel, RangesAreOrdered) {
  for (const std::string& algo : NodeModelNames()) {
    SCOPED_TRACE(algo);
    const NodeNetwork net = Net(128, 8, 25);
    absl::StatusOr<ExchangeCost> hier =
        HierarchicalCost(algo, net, 25'000'000, kDensity, Teams(algo));
    absl::StatusOr<ExchangeCost> flat = FlatCost(algo, net, 25'000'000, kDensity, Teams(algo));
    ASSERT_TRUE(hier.ok() && flat.ok());
    EXPECT_LE(hier->lo_s(), hier->hi_s());
    EXPECT_LE(hier->all_gather.link_bytes_lo, hier->all_gather.link_bytes_hi);
    // The all-gather never sends more than the dense shard.
    EXPECT_LE(hier->all_gather.link_bytes_hi, hier->reduce_scatter.link_bytes_hi);
    EXPECT_LE(flat->lo_s(), flat->hi_s());
  }
}

TEST(SimNodeModel, Flags) {
  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "gradex-sim");
    return ParseSimFlags(static_cast<int>(args.size()), const_cast<char**>(args.data()));
  };
  absl::StatusOr<SimFlags> f = parse(
      {"--ranks", "1024", "--ranks-per-node", "8", "--intra-alpha", "2e-6", "--intra-beta=4e-12"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->ranks_per_node, 8);
  EXPECT_EQ(f->intra_alpha, 2e-6);
  EXPECT_EQ(f->intra_beta, 4e-12);
  const NodeNetwork net = NetworkOf(*f);
  EXPECT_EQ(net.nodes, 128);
  EXPECT_EQ(net.ranks(), 1024);
  EXPECT_EQ(parse({})->ranks_per_node, 1);  // flat runs by default, as before
  EXPECT_NE(parse({"--ranks", "12", "--ranks-per-node", "8"})
                .status()
                .message()
                .find("does not divide --ranks 12"),
            std::string::npos);
  EXPECT_NE(parse({"--ranks-per-node", "0"}).status().message().find(">= 1"), std::string::npos);
  EXPECT_NE(parse({"--intra-beta", "-1"}).status().message().find(">= 0"), std::string::npos);
  for (const char* flag : {"--ranks-per-node", "--intra-alpha", "--intra-beta"}) {
    EXPECT_NE(SimHelpText().find(flag), std::string::npos) << flag;
  }
}

TEST(SimNodeModel, ReportRows) {
  SimFlags f;
  f.ranks = 16;
  f.ranks_per_node = 4;
  f.elements = 1'000'000;
  NodeRow covap = ModelAlgorithm(f, "covap");
  EXPECT_NE(covap.skipped.find("runs flat only"), std::string::npos);
  NodeRow bsag = ModelAlgorithm(f, "spardl-bsag");
  ASSERT_TRUE(bsag.skipped.empty()) << bsag.skipped;
  EXPECT_EQ(bsag.flat_teams, 2);
  EXPECT_EQ(bsag.inter_teams, 2);
  f.ranks = 12;  // 3 nodes: 2 teams do not divide them, the inter-node stage runs one
  f.teams = 2;
  f.ranks_per_node = 4;
  bsag = ModelAlgorithm(f, "spardl-bsag");
  ASSERT_TRUE(bsag.skipped.empty()) << bsag.skipped;
  EXPECT_EQ(bsag.inter_teams, 1);
  const ExchangeCost nccl = NcclHierarchicalDenseCost(NetworkOf(f), f.elements);
  const std::string json = NodeRowJson(bsag, f, nccl);
  EXPECT_NE(json.find(R"("nodes":3,"ranks_per_node":4)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("hier_over_flat_hi":)"), std::string::npos) << json;
  EXPECT_NE(NodeTable({bsag}, f, nccl).find("nccl-hier-dense"), std::string::npos);
}

}  // namespace
}  // namespace gradex::sim
