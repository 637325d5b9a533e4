// The hierarchical exchange (collectives/algorithms/hierarchical.h) against the
// invariants of docs/design.md: every catalog algorithm that may be the
// inter-node stage, on layouts of several nodes of several ranks (nodes in
// rank order and interleaved), densities 0.01 and 1, three calls so
// residuals carry over; plus what the hierarchy is for (the bytes leaving a
// node), the refusals, and a dead peer.
#include "collectives/algorithms/hierarchical.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "catalog/node_layout.h"
#include "harness.h"
#include "transport/subgroup_transport.h"

namespace gradex {
namespace {

using testing::ConservationError;
using testing::Consistent;
using testing::Fabric;
using testing::MakeGradient;
using testing::RankCall;
using testing::RunOrAbort;
using testing::RunRanks;
using testing::Values;

std::vector<std::string> Nodes(int nodes, int per_node, bool interleaved) {
  std::vector<std::string> ids;
  for (int r = 0; r < nodes * per_node; ++r) {
    const int node = interleaved ? r % nodes : r / per_node;
    ids.push_back("node-" + std::to_string(node));
  }
  return ids;
}

// Runs `iterations` calls of `algorithm` on the layout's ranks, wrapped in
// the hierarchy (hierarchical) or flat, from zero residuals or `start`'s.
// Per iteration, per rank.
std::vector<std::vector<RankCall>> RunLayout(
    const std::string& algorithm, const std::vector<std::string>& node_ids, size_t n,
    const collectives::AllreduceOptions& options, int iterations, bool hierarchical,
    Fabric fabric = Fabric::kLoopback, Values kind = Values::kIntegers,
    const std::vector<std::vector<float>>* start = nullptr) {
  const int world = static_cast<int>(node_ids.size());
  std::vector<std::vector<RankCall>> out(iterations, std::vector<RankCall>(world));
  RunRanks(
      world,
      [&](int rank, transport::Transport& t) -> absl::Status {
        absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> algo =
            collectives::CreateAllreduce(algorithm);
        if (!algo.ok()) return algo.status();
        if (hierarchical) {
          auto h = collectives::algorithms::HierarchicalAllreduce::Create(
              *std::move(algo), catalog::LayoutOf(node_ids));
          if (!h.ok()) return h.status();
          algo = std::unique_ptr<collectives::SparseAllreduce>(*std::move(h));
        }
        std::vector<float> residual =
            start != nullptr ? (*start)[rank] : std::vector<float>(n, 0.0f);
        for (int it = 0; it < iterations; ++it) {
          RankCall& c = out[it][rank];
          c.grad = MakeGradient(7, rank, it, n, kind);
          c.residual_in = residual;
          collectives::CallContext ctx{&t,
                                       42,
                                       1,
                                       static_cast<uint64_t>(it),
                                       transport::DeadlineIn(std::chrono::seconds(20)),
                                       static_cast<uint64_t>(it)};
          collectives::AllreduceResult result;
          c.status = RunOrAbort(**algo, ctx, options, c.grad, residual, &result, &c.stats);
          c.residual_out = residual;
          c.result.assign(n, 0.0f);
          if (c.status.ok()) result.ToDense(c.result);
          c.decayed = result.decayed;
          if (!c.status.ok()) return c.status;
        }
        return absl::OkStatus();
      },
      fabric);
  return out;
}

std::vector<std::string> InterNodeAlgorithms() {
  std::vector<std::string> names;
  for (const collectives::CatalogAlgorithm& a : collectives::CatalogAlgorithms()) {
    if (collectives::algorithms::HierarchyExclusion(*a.spec).empty()) names.push_back(a.spec->name);
  }
  return names;
}

class HierarchicalInvariants : public ::testing::TestWithParam<std::string> {};

TEST_P(HierarchicalInvariants, HoldOnEveryLayout) {
  const std::string name = GetParam();
  const catalog::AlgorithmSpec* spec = catalog::Find(name);
  ASSERT_NE(spec, nullptr);
  struct Case {
    int nodes, per_node;
    bool interleaved;
  };
  for (Case lc : {Case{2, 2, false}, Case{2, 3, false}, Case{3, 2, true}, Case{2, 4, false}}) {
    const std::vector<std::string> ids = Nodes(lc.nodes, lc.per_node, lc.interleaved);
    const catalog::NodeLayout layout = catalog::LayoutOf(ids);
    for (size_t n : {size_t{10007}, size_t{3}}) {
      for (double density : {0.01, 1.0}) {
        collectives::AllreduceOptions options;
        options.density = density;
        // Teams run across nodes: two where the node count allows.
        if (spec->traits.uses_teams && lc.nodes % 2 == 0) options.teams = 2;
        for (const auto& [k, v] : spec->traits.dense_params) {
          if (density == 1.0) options.params[k] = v;
        }
        SCOPED_TRACE(name + " " + layout.Describe() + (lc.interleaved ? " interleaved" : "") +
                     " n=" + std::to_string(n) + " density=" + std::to_string(density));
        auto calls = RunLayout(name, ids, n, options, 3, true);
        for (int it = 0; it < 3; ++it) {
          const std::vector<RankCall>& c = calls[it];
          for (const RankCall& r : c) ASSERT_TRUE(r.status.ok()) << r.status;
          EXPECT_TRUE(Consistent(c)) << "iteration " << it;
          const double err = ConservationError(c, true);
          if (spec->traits.exact_on_integers) {
            EXPECT_EQ(err, 0.0) << "iteration " << it;
          } else {
            EXPECT_LE(err, 1e-6) << "iteration " << it;
          }
          for (int r = 0; r < layout.world(); ++r) {
            const collectives::CallStats& st = c[r].stats;
            EXPECT_LE(st.result_nnz, st.result_capacity);
            EXPECT_EQ(st.Detail(collectives::algorithms::kDetailHierarchyNodes), lc.nodes);
            EXPECT_EQ(st.Detail(collectives::algorithms::kDetailHierarchyRanksPerNode),
                      lc.per_node);
            // Every byte is inside the node or across nodes, and the
            // volume model bounds them.
            EXPECT_EQ(st.Detail(collectives::algorithms::kDetailIntraNodeSentBytes) +
                          st.Detail(collectives::algorithms::kDetailInterNodeSentBytes),
                      static_cast<double>(st.sent_bytes));
          }
          // At density 1 the sum is the dense sum (integers: exactly).
          if (density == 1.0 && spec->traits.equals_dense_at_density_one &&
              spec->traits.exact_on_integers) {
            for (size_t i = 0; i < n; ++i) {
              double sum = 0;
              for (const RankCall& r : c) sum += double{r.grad[i]} + r.residual_in[i];
              ASSERT_EQ(c[0].result[i], static_cast<float>(sum)) << "element " << i;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(InterNode, HierarchicalInvariants,
                         ::testing::ValuesIn(InterNodeAlgorithms()), testing::AlgorithmTestName);

// The volume model bounds what every rank sent and received, to the byte
// where the data does not decide it.
TEST(HierarchicalTest, BytesStayWithinTheVolumeModel) {
  for (const std::string name : {"spardl", "topka", "dense-ring", "spardl-bsag"}) {
    const std::vector<std::string> ids = Nodes(2, 3, false);
    const catalog::NodeLayout layout = catalog::LayoutOf(ids);
    collectives::AllreduceOptions options;
    options.density = 0.01;
    auto calls = RunLayout(name, ids, 20011, options, 2, true);
    auto inner = collectives::CreateAllreduce(name);
    ASSERT_TRUE(inner.ok());
    auto h = collectives::algorithms::HierarchicalAllreduce::Create(*std::move(inner), layout);
    ASSERT_TRUE(h.ok()) << h.status();
    for (int r = 0; r < layout.world(); ++r) {
      const collectives::CallStats& st = calls[1][r].stats;
      ASSERT_TRUE(calls[1][r].status.ok()) << calls[1][r].status;
      absl::StatusOr<collectives::Volume> v =
          (*h)->ModelVolume(r, layout.world(), 20011, options, st);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_LE(st.sent_bytes, v->sent_bytes) << name << " rank " << r;
      EXPECT_LE(st.recv_bytes, v->recv_bytes) << name << " rank " << r;
      EXPECT_GE(static_cast<double>(st.sent_bytes), 0.9 * v->sent_bytes) << name << " rank " << r;
    }
  }
}

// What the hierarchy is for: the bytes leaving a node are about what one
// rank of a one-rank-per-node job sends, not L times that.
TEST(HierarchicalTest, ANodeSendsWhatOneFlatRankSends) {
  const size_t n = 200003;
  collectives::AllreduceOptions options;
  options.density = 0.01;
  for (const std::string name : {"spardl", "topka"}) {
    for (auto [nodes, per_node] : {std::pair{2, 4}, std::pair{4, 2}}) {
      const std::vector<std::string> ids = Nodes(nodes, per_node, false);
      auto hier = RunLayout(name, ids, n, options, 2, true);
      auto flat = RunLayout(name, ids, n, options, 2, false);
      auto one = RunLayout(name, Nodes(nodes, 1, false), n, options, 2, false);
      double hier_node = 0, flat_node = 0, one_node = 0;
      for (int r = 0; r < per_node; ++r) {  // node 0's ranks
        ASSERT_TRUE(hier[1][r].status.ok()) << hier[1][r].status;
        hier_node += hier[1][r].stats.Detail(collectives::algorithms::kDetailInterNodeSentBytes);
        flat_node += flat[1][r].stats.sent_bytes;  // to every rank (upper bound off-node)
      }
      one_node = one[1][0].stats.sent_bytes;
      SCOPED_TRACE(name + " " + std::to_string(nodes) + "x" + std::to_string(per_node));
      EXPECT_LE(hier_node, 1.25 * one_node);
      EXPECT_GE(flat_node, 0.8 * per_node * one_node);
    }
  }
}

// The flat and hierarchical results differ only as the algorithm says:
// both conserve, and at density 1 both are the dense sum.
TEST(HierarchicalTest, FlatAndHierarchicalAgreeAtDensityOne) {
  const std::vector<std::string> ids = Nodes(2, 2, false);
  collectives::AllreduceOptions options;
  options.density = 1.0;
  auto hier = RunLayout("spardl", ids, 4099, options, 2, true);
  auto flat = RunLayout("spardl", ids, 4099, options, 2, false);
  for (int it = 0; it < 2; ++it) {
    ASSERT_TRUE(hier[it][0].status.ok());
    ASSERT_TRUE(flat[it][0].status.ok());
    EXPECT_EQ(hier[it][0].result, flat[it][0].result);
  }
  options.density = 0.01;
  hier = RunLayout("spardl", ids, 4099, options, 3, true, Fabric::kLoopback, Values::kGrid);
  for (int it = 0; it < 3; ++it) {
    EXPECT_TRUE(Consistent(hier[it]));
    EXPECT_LE(ConservationError(hier[it], true), 1e-6);
  }
}

// A rank's residual is its shard's error feedback under one layout; under
// another (a flat epoch, a checkpoint restored on other nodes) the
// reduce-scatter carries it to the shard's new holder: nothing is lost.
TEST(HierarchicalTest, ResidualsFromAnotherLayoutAreCarried) {
  collectives::AllreduceOptions options;
  options.density = 0.01;
  const size_t n = 10007;
  auto first = RunLayout("spardl", Nodes(2, 4, false), n, options, 2, true);
  std::vector<std::vector<float>> kept;
  double mass = 0;
  for (const RankCall& c : first[1]) {
    ASSERT_TRUE(c.status.ok()) << c.status;
    kept.push_back(c.residual_out);
    for (float v : c.residual_out) mass += std::fabs(v);
  }
  ASSERT_GT(mass, 0);
  for (auto [layout, hierarchical] :
       {std::pair{Nodes(4, 2, true), true}, std::pair{Nodes(2, 4, true), true},
        std::pair{Nodes(8, 1, false), false}}) {
    auto next = RunLayout("spardl", layout, n, options, 1, hierarchical, Fabric::kLoopback,
                          Values::kIntegers, &kept);
    for (const RankCall& c : next[0]) ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(next[0][0].residual_in, kept[0]);
    EXPECT_TRUE(Consistent(next[0]));
    EXPECT_EQ(ConservationError(next[0], true), 0.0);
  }
}

TEST(HierarchicalTest, RunsOverUcx) {
  collectives::AllreduceOptions options;
  options.density = 0.01;
  auto calls = RunLayout("spardl-bsag", Nodes(2, 2, false), 10007, options, 2, true, Fabric::kUcx);
  for (int it = 0; it < 2; ++it) {
    for (const RankCall& r : calls[it]) ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_TRUE(Consistent(calls[it]));
    EXPECT_EQ(ConservationError(calls[it], true), 0.0);
  }
}

TEST(HierarchicalTest, RefusesWhatCannotRunHierarchically) {
  auto make = [](const std::string& name, const std::vector<std::string>& ids) {
    auto a = collectives::CreateAllreduce(name);
    EXPECT_TRUE(a.ok());
    return collectives::algorithms::HierarchicalAllreduce::Create(*std::move(a),
                                                                  catalog::LayoutOf(ids));
  };
  EXPECT_TRUE(make("spardl", Nodes(2, 2, false)).ok());
  auto uneven = make("spardl", {"a", "a", "a", "b"});
  EXPECT_EQ(uneven.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(uneven.status().message().find("uneven nodes (2 nodes of 3, 1 ranks)"),
            std::string::npos)
      << uneven.status();
  EXPECT_NE(make("spardl", {"a", "a"}).status().message().find("one node"), std::string::npos);
  EXPECT_NE(make("spardl", {"a", "b"}).status().message().find("one rank per node"),
            std::string::npos);
  auto covap = make("covap", Nodes(2, 2, false));
  EXPECT_NE(covap.status().message().find("runs flat only"), std::string::npos) << covap.status();
}

// A rank dead before the call: every survivor fails well before its
// deadline, with its gradient + old residual kept.
TEST(HierarchicalTest, ADeadRankFailsEverySurvivorWithItsContributionKept) {
  const std::vector<std::string> ids = Nodes(2, 2, false);
  const size_t n = 5003;
  for (int victim : {0, 3}) {
    std::vector<absl::Status> status(4);
    std::vector<std::vector<float>> kept(4), expected(4);
    std::vector<double> seconds(4, 0);
    RunRanks(4, [&](int rank, transport::Transport& t) -> absl::Status {
      if (rank == victim) {
        t.Abort(transport::DeadlineIn(std::chrono::seconds(1)));
        return absl::OkStatus();
      }
      auto algo = collectives::CreateAllreduce("spardl");
      if (!algo.ok()) return algo.status();
      auto h = collectives::algorithms::HierarchicalAllreduce::Create(*std::move(algo),
                                                                      catalog::LayoutOf(ids));
      if (!h.ok()) return h.status();
      std::vector<float> grad = MakeGradient(3, rank, 0, n, Values::kIntegers);
      std::vector<float> residual(n, 0.5f);
      expected[rank] = residual;
      for (size_t i = 0; i < n; ++i) expected[rank][i] += grad[i];
      collectives::AllreduceOptions options;
      collectives::CallContext ctx{&t, 42, 1, 0, transport::DeadlineIn(std::chrono::seconds(20)),
                                   0};
      collectives::AllreduceResult result;
      collectives::CallStats stats;
      const auto start = transport::Clock::now();
      status[rank] = RunOrAbort(**h, ctx, options, grad, residual, &result, &stats);
      seconds[rank] = std::chrono::duration<double>(transport::Clock::now() - start).count();
      kept[rank] = residual;
      return absl::OkStatus();
    });
    for (int r = 0; r < 4; ++r) {
      if (r == victim) continue;
      EXPECT_FALSE(status[r].ok()) << "rank " << r;
      EXPECT_LT(seconds[r], 10.0) << "rank " << r;
      EXPECT_EQ(kept[r], expected[r]) << "rank " << r;
    }
  }
}

TEST(SubgroupTransportTest, MapsRanksAndRefusesStrangers) {
  RunRanks(4, [](int rank, transport::Transport& t) -> absl::Status {
    auto bad = transport::SubgroupTransport::Create(&t, {rank == 0 ? 1 : 0});
    EXPECT_FALSE(bad.ok());
    EXPECT_FALSE(transport::SubgroupTransport::Create(&t, {rank, rank}).ok());
    EXPECT_FALSE(transport::SubgroupTransport::Create(&t, {rank, 9}).ok());
    // Ranks {1, 3} and {0, 2}: the view's rank 1 is the world's 3 or 2.
    std::vector<int> members = rank % 2 == 1 ? std::vector<int>{1, 3} : std::vector<int>{0, 2};
    auto view = transport::SubgroupTransport::Create(&t, members);
    if (!view.ok()) return view.status();
    EXPECT_EQ((*view)->size(), 2);
    EXPECT_EQ((*view)->rank(), rank / 2);
    const int peer = 1 - (*view)->rank();
    absl::StatusOr<transport::Bytes> got =
        transport::SendRecv(**view, peer, 5, transport::Bytes{static_cast<uint8_t>(rank)}, peer, 5,
                            transport::DeadlineIn(std::chrono::seconds(10)));
    if (!got.ok()) return got.status();
    EXPECT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0], static_cast<uint8_t>(members[peer]));
    EXPECT_FALSE((*view)->PostSend(2, 5, transport::Bytes{}).ok());
    EXPECT_EQ((*view)->counters(peer).sent_bytes, t.counters(members[peer]).sent_bytes);
    return absl::OkStatus();
  });
}

TEST(NodeLayoutTest, NumbersNodesByTheirLowestRank) {
  const catalog::NodeLayout l = catalog::LayoutOf(std::vector<std::string>{"b", "a", "b", "a"});
  EXPECT_EQ(l.node_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(l.local_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l.Group(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(l.ranks_per_node(), 2);
  EXPECT_EQ(l.Describe(), "2 nodes x 2 ranks");
  EXPECT_TRUE(catalog::Hierarchical(l));
  const catalog::NodeLayout u = catalog::LayoutOf(std::vector<std::string>{"a", "b", "a"});
  EXPECT_EQ(u.ranks_per_node(), 0);
  EXPECT_TRUE(u.Group(1).empty());
  EXPECT_EQ(catalog::FlatReason(u), "uneven nodes (2 nodes of 2, 1 ranks)");
  EXPECT_EQ(catalog::FlatLayout(3).Describe(), "3 nodes x 1 rank");
}

}  // namespace
}  // namespace gradex
