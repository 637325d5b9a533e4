#include "tests/collectives/harness.h"

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "transport/loopback_transport.h"

namespace gradex::testing {

std::vector<float> MakeGradient(uint64_t seed, int rank, int iteration, size_t n, Values kind) {
  std::mt19937_64 rng(seed * 1000003 + rank * 7919 + iteration);
  std::vector<float> g(n);
  if (kind == Values::kIntegers) {
    std::uniform_int_distribution<int> d(-8, 8);
    for (float& v : g) v = static_cast<float>(d(rng));
  } else {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (float& v : g) v = u(rng) < 0.05f ? 0.0f : std::round(d(rng) * 64.0f) / 64.0f;
  }
  return g;
}

std::vector<absl::Status> RunRanks(int world,
                                   const std::function<absl::Status(int, Transport&)>& fn) {
  auto transports = CreateLoopbackTransports(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { status[r] = fn(r, *transports[r]); });
  }
  for (auto& t : threads) t.join();
  return status;
}

std::vector<std::vector<RankCall>> RunAlgorithm(const std::string& algorithm, int world, size_t n,
                                                const AllreduceOptions& options, int iterations,
                                                Values kind, uint64_t seed) {
  std::vector<std::vector<RankCall>> out(iterations, std::vector<RankCall>(world));
  RunRanks(world, [&](int rank, Transport& t) -> absl::Status {
    auto algo = CreateAllreduce(algorithm);
    if (!algo.ok()) return algo.status();
    std::vector<float> residual(n, 0.0f);
    for (int it = 0; it < iterations; ++it) {
      RankCall& c = out[it][rank];
      c.grad = MakeGradient(seed, rank, it, n, kind);
      c.residual_in = residual;
      CallContext ctx{&t, /*job_id=*/42, /*epoch=*/1, /*step=*/static_cast<uint64_t>(it),
                      DeadlineIn(std::chrono::seconds(20))};
      AllreduceResult result;
      c.status = (*algo)->Run(ctx, options, c.grad, residual, &result, &c.stats);
      c.residual_out = residual;
      c.result.assign(n, 0.0f);
      result.ToDense(c.result);
      if (!c.status.ok()) return c.status;
    }
    return absl::OkStatus();
  });
  return out;
}

bool Consistent(const std::vector<RankCall>& calls) {
  for (const RankCall& c : calls) {
    if (c.result.size() != calls[0].result.size()) return false;
    if (std::memcmp(c.result.data(), calls[0].result.data(), c.result.size() * sizeof(float))) {
      return false;
    }
  }
  return true;
}

double ConservationError(const std::vector<RankCall>& calls, bool relative) {
  const size_t n = calls[0].grad.size();
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double in = 0, out = calls[0].result[i], scale = std::fabs(calls[0].result[i]);
    for (const RankCall& c : calls) {
      in += double{c.grad[i]} + c.residual_in[i];
      out += c.residual_out[i];
      scale += std::fabs(c.grad[i]) + std::fabs(c.residual_in[i]) + std::fabs(c.residual_out[i]);
    }
    double err = std::fabs(in - out);
    if (relative && scale > 0) err /= scale;
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace gradex::testing
