// Adding an algorithm takes one .cc (its schedule and its catalog entry) and
// its CMake line. This file is such an algorithm, added inside the test: the
// invariant sweep (invariants_test.cc, linked into the same binary) runs it
// as it runs every catalog algorithm, and the coordinator's job-config check
// accepts its name.
//
// test-dense-gather: the schedule of test_dense_gather.h.
#include "catalog/catalog.h"
#include "gtest/gtest.h"
#include "services/coordinator/job_config.h"
#include "tests/collectives/harness.h"
#include "tests/collectives/test_dense_gather.h"

namespace gradex::testing {
namespace {

constexpr char kName[] = "test-dense-gather";

GRADEX_CATALOG_ENTRY({.id = 60001,
                      .name = kName,
                      .description = "test only: all-to-all of dense vectors, summed in rank order",
                      .traits = {.dense = true}});

class DenseGather final : public TestDenseGather {
 public:
  DenseGather() : TestDenseGather(kName) {}
};

GRADEX_REGISTER_ALGORITHM(kName, [] { return std::make_unique<DenseGather>(); });

TEST(AddedAlgorithm, IsInTheCatalogAndTheSweep) {
  const catalog::AlgorithmSpec* spec = catalog::Find(kName);
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(spec->id, 60001);
  bool listed = false;
  for (const collectives::CatalogAlgorithm& a : collectives::CatalogAlgorithms())
    listed |= a.spec->name == kName;
  // AllreduceNames() is what InvariantsTest is instantiated over: the sweep
  // runs Algorithms/InvariantsTest.*/test_dense_gather.
  EXPECT_TRUE(listed);
  auto algo = collectives::CreateAllreduce(kName);
  ASSERT_TRUE(algo.ok()) << algo.status();
  EXPECT_EQ(static_cast<uint16_t>((*algo)->id()), 60001);
  EXPECT_TRUE((*algo)->traits().dense);
}

TEST(AddedAlgorithm, RunsAndStampsItsCatalogId) {
  auto runs = RunAlgorithm(kName, 3, 101, collectives::AllreduceOptions{}, 2, Values::kIntegers);
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
