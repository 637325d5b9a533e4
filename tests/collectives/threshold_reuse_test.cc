// Threshold reuse inside the call frame (LocalTopK, kernels::ThresholdReuse):
// for every catalog algorithm, calls with reuse on give the bits of calls
// with it off, results and residuals, over calls that carry the reuse state;
// and the top-k local parts do reuse (hits reported in the call's details).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectives/sparse_allreduce.h"
#include "tests/collectives/harness.h"

namespace gradex::testing {
namespace {

constexpr int kWorld = 3;
constexpr size_t kN = 20011;
constexpr int kCalls = 8;

collectives::AllreduceOptions Opts(bool reuse) {
  collectives::AllreduceOptions o;
  o.density = 0.01;
  o.teams = 1;
  o.threshold_reuse = reuse;
  return o;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ThresholdReuseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ThresholdReuseTest, SameBitsWithAndWithoutReuse) {
  const auto on = RunAlgorithm(GetParam(), kWorld, kN, Opts(true), kCalls, Values::kGrid, 5);
  const auto off = RunAlgorithm(GetParam(), kWorld, kN, Opts(false), kCalls, Values::kGrid, 5);
  ASSERT_EQ(on.size(), off.size());
  double hits = 0, misses = 0;
  bool reports = false;
  for (size_t it = 0; it < on.size(); ++it) {
    for (int r = 0; r < kWorld; ++r) {
      const RankCall& a = on[it][r];
      const RankCall& b = off[it][r];
      ASSERT_TRUE(a.status.ok()) << a.status;
      ASSERT_TRUE(b.status.ok()) << b.status;
      ASSERT_TRUE(SameBits(a.result, b.result)) << "call " << it << " rank " << r;
      ASSERT_TRUE(SameBits(a.residual_out, b.residual_out)) << "call " << it << " rank " << r;
      EXPECT_EQ(b.stats.details.count("topk_reuse_hits"), 0u) << "reuse off reports none";
      if (a.stats.details.count("topk_reuse_hits") > 0) reports = true;
      hits += a.stats.Detail("topk_reuse_hits");
      misses += a.stats.Detail("topk_reuse_misses");
    }
  }
  // The top-k local parts report; on these gradients (the same distribution
  // every call) most calls after the first finish among the candidates.
  const bool topk_local = GetParam() == "spardl" || GetParam() == "spardl-rsag" ||
                          GetParam() == "spardl-bsag" || GetParam() == "topka" ||
                          GetParam() == "topkdsa" || GetParam() == "gtopk" ||
                          GetParam() == "sparcml-ssar-rd" || GetParam() == "sparcml-ssar-split" ||
                          GetParam() == "sparcml-dsar-split";
  EXPECT_EQ(reports, topk_local) << GetParam();
  if (topk_local) {
    EXPECT_GT(hits, misses) << GetParam() << ": " << hits << " hits, " << misses << " misses";
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ThresholdReuseTest,
                         ::testing::ValuesIn(collectives::AllreduceNames()), AlgorithmTestName);

}  // namespace
}  // namespace gradex::testing
