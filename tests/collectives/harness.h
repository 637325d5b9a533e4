// Thread-per-rank harness for collectives tests (in the spirit of gloo's
// base_test.h: one harness sweeps transports x sizes): P ranks over the
// loopback fabric, the simulator or UCX, seeded gradients with ties and
// zeros, and the invariant checks of docs/design.md over every rank's data.
#ifndef GRADEX_TESTS_COLLECTIVES_HARNESS_H_
#define GRADEX_TESTS_COLLECTIVES_HARNESS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/sparse_allreduce.h"
#include "transport/transport.h"

namespace gradex::testing {

enum class Values {
  kIntegers,  // small integers in [-8, 8], about 1/17 zeros: exact sums, many ties
  kGrid,      // normal values rounded to a 1/64 grid, 5% zeros: ties, rounding
};

std::vector<float> MakeGradient(uint64_t seed, int rank, int iteration, size_t n, Values kind);

// The transports a world can run on: the loopback fabric, the simulator (the
// same fabric under α-β clocks) and UCX (a context and worker per rank, over
// TCP on the loopback interface).
enum class Fabric { kLoopback, kSim, kUcx };
std::string FabricName(Fabric fabric);
inline constexpr Fabric kAllFabrics[] = {Fabric::kLoopback, Fabric::kSim, Fabric::kUcx};

// Runs fn(rank, transport) on P threads of one world of `fabric`. Every rank's
// transport exists (UCX: is wired up) before any fn starts, and lives until
// every fn has returned.
// An algorithm's catalog name as a test name ('-' as '_': gtest names take
// letters, digits and '_' only), and the same for a test parameter that is
// the name itself.
inline std::string TestName(std::string algorithm) {
  for (char& c : algorithm) c = c == '-' ? '_' : c;
  return algorithm;
}
inline std::string AlgorithmTestName(const ::testing::TestParamInfo<std::string>& info) {
  return TestName(info.param);
}

std::vector<absl::Status> RunRanks(
    int world, const std::function<absl::Status(int, transport::Transport&)>& fn,
    Fabric fabric = Fabric::kLoopback);

// Runs one call as its owners do (agent, bench): a failed call aborts the
// transport, so that peers waiting on this rank fail now, not at their
// deadline.
absl::Status RunOrAbort(collectives::SparseAllreduce& algo, const collectives::CallContext& ctx,
                        const collectives::AllreduceOptions& options, std::span<const float> grad,
                        std::span<float> residual, collectives::AllreduceResult* result,
                        collectives::CallStats* stats);

// What one rank saw in one call.
struct RankCall {
  std::vector<float> grad, residual_in, residual_out, result;  // result as dense
  std::vector<float> decayed;  // AllreduceResult::decayed: empty when nothing decays
  collectives::CallStats stats;
  absl::Status status;
};

// Runs `iterations` calls of `algorithm` on `world` ranks; every rank keeps its
// residual across calls. Returns per iteration, per rank.
std::vector<std::vector<RankCall>> RunAlgorithm(const std::string& algorithm, int world, size_t n,
                                                const collectives::AllreduceOptions& options,
                                                int iterations, Values kind, uint64_t seed = 1,
                                                Fabric fabric = Fabric::kLoopback);

// One run of RunAlgorithm, for RunAlgorithmCases.
struct RunSpec {
  int world = 1;
  size_t n = 0;
  collectives::AllreduceOptions options;
  int iterations = 1;
  Values kind = Values::kIntegers;
  uint64_t seed = 1;
};

// Runs every spec as RunAlgorithm would (a fresh algorithm object and a zero
// residual each), but the specs of one world size share one world, in order:
// a world costs milliseconds on loopback and far more on UCX. Calls a rank
// could not run because an earlier call failed carry an ABORTED status.
std::vector<std::vector<std::vector<RankCall>>> RunAlgorithmCases(const std::string& algorithm,
                                                                  const std::vector<RunSpec>& specs,
                                                                  Fabric fabric);

// Invariant 1: every rank's result is bitwise identical.
bool Consistent(const std::vector<RankCall>& calls);
// Invariant 2: max over elements of |sum(grad + res_in) - result - sum(res_out)
// - sum(decayed)| relative to the sum of the magnitudes of those terms (0 when
// exact). `decayed` is what error feedback's coefficient removed (COVAP).
double ConservationError(const std::vector<RankCall>& calls, bool relative);

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_COLLECTIVES_HARNESS_H_
