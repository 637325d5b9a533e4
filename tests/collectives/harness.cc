#include "tests/collectives/harness.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "tests/transport/test_util.h"
#include "transport/loopback_transport.h"
#include "transport/sim_transport.h"
#include "transport/ucx/ucx_transport.h"

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

absl::Status RunOrAbort(collectives::SparseAllreduce& algo, const collectives::CallContext& ctx,
                        const collectives::AllreduceOptions& options, std::span<const float> grad,
                        std::span<float> residual, collectives::AllreduceResult* result,
                        collectives::CallStats* stats) {
  absl::Status s = algo.Run(ctx, options, grad, residual, result, stats);
  if (!s.ok() && ctx.transport != nullptr) {
    ctx.transport->Abort(
        std::min(ctx.deadline, transport::DeadlineIn(std::chrono::milliseconds(500))));
  }
  return s;
}

std::string FabricName(Fabric fabric) {
  switch (fabric) {
    case Fabric::kLoopback:
      return "loopback";
    case Fabric::kSim:
      return "sim";
    case Fabric::kUcx:
      return "ucx";
  }
  return "?";
}

namespace {

// Ranks of an in-process fabric (loopback or sim), created up front.
std::vector<absl::Status> RunFabric(
    std::vector<std::unique_ptr<transport::Transport>> transports,
    const std::function<absl::Status(int, transport::Transport&)>& fn) {
  std::vector<absl::Status> status(transports.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < transports.size(); ++r) {
    threads.emplace_back([&, r] { status[r] = fn(static_cast<int>(r), *transports[r]); });
  }
  for (auto& t : threads) t.join();
  return status;
}

// UCX ranks build their context and worker on their own thread; a second
// bootstrap round after wire-up keeps a rank that fails (or aborts) at once
// from racing a peer's connection setup. A rank whose transport is aborted
// when fn returns destroys it at once, as the agent does after a failed call
// (over TCP, peers of a rank aborted but kept idle were seen to wait to their
// deadline; destroying it fails them at once); the others wait for every
// rank first, so that no rank tears down endpoints a peer still uses.
std::vector<absl::Status> RunUcx(
    int world, const std::function<absl::Status(int, transport::Transport&)>& fn) {
  transport::ucx::UcxOptions opt;
  opt.tls = "tcp";
  opt.connect_timeout = std::chrono::milliseconds(20000);
  auto exchange = std::make_shared<InProcessExchange>(world);
  std::vector<absl::Status> status(world);
  std::barrier done(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      InProcessBootstrap boot(exchange, r);
      absl::StatusOr<std::unique_ptr<transport::Transport>> t =
          transport::ucx::CreateUcxTransport(boot, opt);
      absl::Status ready = t.status();
      if (ready.ok())
        ready = boot.AllGather("", transport::DeadlineIn(opt.connect_timeout)).status();
      status[r] = ready.ok() ? fn(r, **t) : ready;
      if (t.ok() && (*t)->aborted()) t->reset();
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

}  // namespace

std::vector<absl::Status> RunRanks(
    int world, const std::function<absl::Status(int, transport::Transport&)>& fn, Fabric fabric) {
  switch (fabric) {
    case Fabric::kLoopback:
      return RunFabric(transport::CreateLoopbackTransports(world), fn);
    case Fabric::kSim:
      return RunFabric(transport::CreateSimTransports(world, transport::SimParams{}), fn);
    case Fabric::kUcx:
      return RunUcx(world, fn);
  }
  return std::vector<absl::Status>(world, absl::InvalidArgumentError("unknown fabric"));
}

std::vector<std::vector<RankCall>> RunAlgorithm(const std::string& algorithm, int world, size_t n,
                                                const collectives::AllreduceOptions& options,
                                                int iterations, Values kind, uint64_t seed,
                                                Fabric fabric) {
  RunSpec spec{world, n, options, iterations, kind, seed};
  return RunAlgorithmCases(algorithm, {spec}, fabric)[0];
}

std::vector<std::vector<std::vector<RankCall>>> RunAlgorithmCases(const std::string& algorithm,
                                                                  const std::vector<RunSpec>& specs,
                                                                  Fabric fabric) {
  std::vector<std::vector<std::vector<RankCall>>> out(specs.size());
  std::map<int, std::vector<size_t>> by_world;  // world size -> spec indices, in order
  for (size_t i = 0; i < specs.size(); ++i) {
    RankCall not_run;
    not_run.status = absl::AbortedError("call not run: an earlier call failed on this rank");
    out[i].assign(specs[i].iterations, std::vector<RankCall>(specs[i].world, not_run));
    by_world[specs[i].world].push_back(i);
  }
  for (const auto& [world, indices] : by_world) {
    RunRanks(
        world,
        [&, &indices = indices](int rank, transport::Transport& t) -> absl::Status {
          for (size_t i : indices) {
            const RunSpec& spec = specs[i];
            auto algo = collectives::CreateAllreduce(algorithm);
            if (!algo.ok()) return algo.status();
            std::vector<float> residual(spec.n, 0.0f);
            for (int it = 0; it < spec.iterations; ++it) {
              RankCall& c = out[i][it][rank];
              c.grad = MakeGradient(spec.seed, rank, it, spec.n, spec.kind);
              c.residual_in = residual;
              collectives::CallContext ctx{&t,
                                           /*job_id=*/42,
                                           /*epoch=*/1,
                                           /*call_id=*/static_cast<uint64_t>(it),
                                           transport::DeadlineIn(std::chrono::seconds(20)),
                                           /*training_step=*/static_cast<uint64_t>(it)};
              collectives::AllreduceResult result;
              c.status = RunOrAbort(**algo, ctx, spec.options, c.grad, residual, &result, &c.stats);
              c.residual_out = residual;
              c.result.assign(spec.n, 0.0f);
              result.ToDense(c.result);
              c.decayed = result.decayed;
              if (!c.status.ok()) return c.status;
            }
          }
          return absl::OkStatus();
        },
        fabric);
  }
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
      if (!c.decayed.empty()) {
        out += c.decayed[i];
        scale += std::fabs(c.decayed[i]);
      }
    }
    double err = std::fabs(in - out);
    if (relative && scale > 0) err /= scale;
    worst = std::max(worst, err);
  }
  return worst;
}

}  // namespace gradex::testing
