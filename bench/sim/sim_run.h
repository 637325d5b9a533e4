// One algorithm on P simulated ranks (threads over the sim transport): the
// real algorithm code runs on seeded gradients; time is the virtual clock.
#ifndef GRADEX_BENCH_SIM_SIM_RUN_H_
#define GRADEX_BENCH_SIM_SIM_RUN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "transport/sim_transport.h"

namespace gradex::sim {

struct SimConfig {
  std::string algo;
  int ranks = 4;
  uint64_t elements = 1'000'000;
  double density = 0.01;
  int teams = 1;  // already resolved for the algorithm (1 when it has none)
  transport::SimParams params;
  int iters = 1;  // calls, residuals carried across them; all are timed
  uint64_t seed = 1;
  bool integer = false;  // integer gradients: conservation checked exactly
  int64_t deadline_ms = 600'000;
};

struct SimOutcome {
  // Modeled time of a call: max over ranks of the virtual clock, which every
  // rank starts at 0 once all ranks have finished the previous call.
  double time_mean_s = 0;
  double time_last_s = 0;
  // Bytes per rank of the last call (frame headers included): max and mean.
  uint64_t sent_max = 0, recv_max = 0, messages_max = 0;
  double sent_mean = 0, recv_mean = 0;
  size_t result_nnz = 0;
  size_t result_capacity = 0;
  // Invariants, over every call: bitwise identical results on all ranks, and
  // sum(grad + residual_in - residual_out) == result (exactly on integer
  // gradients when the algorithm promises it, else within float rounding).
  bool consistent = true;
  bool conserved = true;
  double max_conservation_err = 0;  // max |result - reference|
};

// Fails when the algorithm is unknown, rejects the configuration, or a call
// fails on any rank (the first error is returned).
absl::StatusOr<SimOutcome> RunSim(const SimConfig& config);

// Peak resident set of this process so far, bytes.
uint64_t PeakRssBytes();

}  // namespace gradex::sim

#endif  // GRADEX_BENCH_SIM_SIM_RUN_H_
