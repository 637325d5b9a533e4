// Adding an algorithm takes one .cc (its schedule and its catalog entry) and
// its CMake line. This file is such an algorithm, added inside the test: the
// invariant sweep (invariants_test.cc, linked into the same binary) runs it
// as it runs every catalog algorithm, and the coordinator's job-config check
// accepts its name.
//
// test-dense-gather: every rank sends its gradient + residual to every other
// rank and sums the P vectors in rank order, so every rank holds the same bits.
#include <cstring>

#include "catalog/catalog.h"
#include "collectives/dense_allreduce.h"
#include "collectives/link.h"
#include "collectives/phase_timer.h"
#include "gtest/gtest.h"
#include "services/coordinator/job_config.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

constexpr char kName[] = "test-dense-gather";

GRADEX_CATALOG_ENTRY({.id = 60001,
                      .name = kName,
                      .description = "test only: all-to-all of dense vectors, summed in rank order",
                      .traits = {.dense = true}});

class DenseGather final : public DenseAllreduce {
 public:
  std::string_view name() const override { return kName; }
  absl::StatusOr<Volume> ModelVolume(int, int world, size_t n, const AllreduceOptions&,
                                     const CallStats&) const override {
    const uint64_t frame = sizeof(FrameHeader) + 4 * uint64_t{n};
    const uint64_t peers = world - 1;
    return Volume{peers * frame, peers * frame, peers};
  }

 protected:
  absl::Status ReduceDense(const CallContext& ctx, float* data, size_t n,
                           PhaseTimes* times) override {
    const int p = ctx.transport->size(), r = ctx.transport->rank();
    Link link(ctx, id(), times);
    const BlockRange whole{0, static_cast<uint32_t>(n)};
    std::vector<std::vector<float>> from(p, std::vector<float>(n, 0.0f));
    std::memcpy(from[r].data(), data, n * sizeof(float));
    for (int d = 1; d < p; ++d) {
      Bytes out;
      AppendDenseFrame(link.meta(1), whole, data, &out);
      const int src = (r - d + p) % p;
      absl::StatusOr<Bytes> in = link.Exchange((r + d) % p, std::move(out), src, 1, d);
      if (!in.ok()) return in.status();
      absl::Status st = DecodeDenseBlock(*in, link.meta(1), whole, false, from[src].data());
      if (!st.ok()) return st;
    }
    PhaseTimer t(&times->reduction_s);
    for (size_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int q = 0; q < p; ++q) s += from[q][i];
      data[i] = s;
    }
    return absl::OkStatus();
  }
};

GRADEX_REGISTER_ALGORITHM(kName, [] { return std::make_unique<DenseGather>(); });

TEST(AddedAlgorithm, IsInTheCatalogAndTheSweep) {
  const catalog::AlgorithmSpec* spec = catalog::Find(kName);
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->id, 60001);
  bool listed = false;
  for (const CatalogAlgorithm& a : CatalogAlgorithms()) listed |= a.spec->name == kName;
  // AllreduceNames() is what InvariantsTest is instantiated over: the sweep
  // runs Algorithms/InvariantsTest.*/test_dense_gather.
  EXPECT_TRUE(listed);
  auto algo = CreateAllreduce(kName);
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(static_cast<uint16_t>((*algo)->id()), 60001);
  EXPECT_TRUE((*algo)->traits().dense);
}

TEST(AddedAlgorithm, RunsAndStampsItsCatalogId) {
  auto runs = RunAlgorithm(kName, 3, 101, AllreduceOptions{}, 2, Values::kIntegers);
  for (const auto& calls : runs) {
    for (const RankCall& c : calls) ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_TRUE(Consistent(calls));
    EXPECT_EQ(ConservationError(calls, false), 0.0);
  }
}

TEST(AddedAlgorithm, JobConfigAcceptsIt) {
  auto s = coordinator::ParseJobConfig(
      R"({"job_id":"j","world_size":4,"algorithm":"test-dense-gather","density":0.01})");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->algorithm, kName);
  EXPECT_TRUE(coordinator::IsKnownAlgorithm(kName));
}

}  // namespace
}  // namespace gradex::testing
