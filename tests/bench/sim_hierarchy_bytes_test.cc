// The node model's bytes (bench/sim/node_model.h) against the real
// hierarchical exchange (collectives/algorithms/hierarchical.h) on simulated ranks:
// per node, the bytes its ranks send to other nodes must lie in the model's
// inter-node range; per rank, the bytes it sends inside its node in the
// reduce-scatter + all-gather range (its lower end only where every rank
// sends the critical path's bytes). Slack: frame headers (48 B a frame,
// two frames a gather message) and the algorithm's volume slack below.
#include <string>
#include <thread>
#include <vector>

#include "bench/gradient_gen.h"
#include "bench/sim/node_model.h"
#include "catalog/catalog.h"
#include "catalog/node_layout.h"
#include "collectives/algorithms/hierarchical.h"
#include "collectives/sparse_allreduce.h"
#include "gtest/gtest.h"
#include "transport/sim_transport.h"

namespace gradex::sim {
namespace {

constexpr double kFrameHeader = 48;

struct RankOut {
  collectives::CallStats stats;
  absl::Status status;
};

std::vector<RankOut> RunHierarchy(const std::string& algo, int nodes, int per_node, size_t n,
                                  double density) {
  const int p = nodes * per_node;
  std::vector<std::string> node_of(p);
  for (int r = 0; r < p; ++r) node_of[r] = "node" + std::to_string(r / per_node);
  const catalog::NodeLayout layout = catalog::LayoutOf(node_of);
  std::vector<std::unique_ptr<transport::Transport>> world =
      transport::CreateSimTransports(p, transport::SimParams{0, 1e-9, 0});
  std::vector<RankOut> out(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> inner =
          collectives::CreateAllreduce(algo);
      if (!inner.ok()) {
        out[r].status = inner.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<collectives::algorithms::HierarchicalAllreduce>> h =
          collectives::algorithms::HierarchicalAllreduce::Create(std::move(*inner), layout);
      if (!h.ok()) {
        out[r].status = h.status();
        return;
      }
      std::vector<float> grad(n), residual(n, 0.0f);
      bench::GenerateGradient(1, r, 0, false, grad);
      collectives::AllreduceOptions options;
      options.density = density;
      options.teams = 1;
      collectives::CallContext ctx{
          world[r].get(), 1, 1, 0, transport::DeadlineIn(std::chrono::seconds(60)), 0};
      collectives::AllreduceResult result;
      out[r].status = (*h)->Run(ctx, options, grad, residual, &result, &out[r].stats);
      if (!out[r].status.ok())
        world[r]->Abort(transport::DeadlineIn(std::chrono::milliseconds(500)));
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

struct Case {
  std::string algo;
  int nodes, per_node;
  // Every rank sends the critical path's bytes (no tree): the row is also
  // a lower bound of what leaves a node. gtopk's tree sends less off it.
  bool symmetric = true;
};

class HierarchyBytes : public ::testing::TestWithParam<Case> {};

TEST_P(HierarchyBytes, RealBytesLieInTheModel) {
  const Case c = GetParam();
  constexpr size_t kN = 200'000;
  constexpr double kDensity = 0.01;
  const catalog::AlgorithmSpec* spec = catalog::Find(c.algo);
  ASSERT_NE(spec, nullptr);
  NodeNetwork net;
  net.nodes = c.nodes;
  net.ranks_per_node = c.per_node;
  absl::StatusOr<ExchangeCost> model = HierarchicalCost(c.algo, net, kN, kDensity, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<RankOut> out = RunHierarchy(c.algo, c.nodes, c.per_node, kN, kDensity);
  for (const RankOut& o : out) ASSERT_TRUE(o.status.ok()) << o.status;

  const double slack = spec->traits.volume_slack;
  const double inter_frames = model->inter.messages * c.nodes;  // at most N frames a message
  for (int node = 0; node < c.nodes; ++node) {
    double sent = 0;
    for (int l = 0; l < c.per_node; ++l) {
      sent += out[node * c.per_node + l].stats.Detail(
          collectives::algorithms::kDetailInterNodeSentBytes);
    }
    SCOPED_TRACE("node " + std::to_string(node));
    if (c.symmetric) EXPECT_GE(sent, model->inter.nic_bytes_lo * (1 - slack));
    EXPECT_LE(sent, model->inter.nic_bytes_hi * 1.02 + c.per_node * inter_frames * kFrameHeader);
  }
  const double intra_lo = model->reduce_scatter.link_bytes_lo;  // the gather may cancel to nothing
  const double intra_hi = model->reduce_scatter.link_bytes_hi + model->all_gather.link_bytes_hi +
                          3 * (c.per_node - 1) * kFrameHeader + 4.0 * 2 * (c.per_node - 1);
  for (int r = 0; r < c.nodes * c.per_node; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const double sent = out[r].stats.Detail(collectives::algorithms::kDetailIntraNodeSentBytes);
    // A shard is ⌈n/L⌉ or one less; the model prices the larger.
    EXPECT_GE(sent, intra_lo - 4.0 * (c.per_node - 1));
    EXPECT_LE(sent, intra_hi);
  }
}

INSTANTIATE_TEST_SUITE_P(Sim, HierarchyBytes,
                         ::testing::Values(Case{"spardl", 2, 4}, Case{"spardl", 4, 2},
                                           Case{"spardl", 4, 4}, Case{"topka", 4, 2},
                                           Case{"gtopk", 4, 2, false}, Case{"dense-ring", 2, 4}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string name = i.param.algo + "_" + std::to_string(i.param.nodes) +
                                              "x" + std::to_string(i.param.per_node);
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

}  // namespace
}  // namespace gradex::sim
