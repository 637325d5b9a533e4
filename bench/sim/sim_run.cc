#include "bench/sim/sim_run.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/gradient_gen.h"
#include "catalog/fnv1a.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::sim {
namespace {

// Hash of the result's non-zero-bit entries in index order: the same for a
// dense and a sparse form of one vector, different iff some entry's bits differ.
uint64_t HashResult(const collectives::AllreduceResult& r) {
  uint64_t h = catalog::kFnv1aOffsetBasis;
  auto mix = [&h](uint64_t i, float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (bits == 0) return;
    h = catalog::Fnv1aMix(catalog::Fnv1aMix(h, i), bits);
  };
  if (r.is_dense) {
    for (size_t i = 0; i < r.dense.size(); ++i) mix(i, r.dense[i]);
  } else {
    for (size_t j = 0; j < r.sparse.idx.size(); ++j) mix(r.sparse.idx[j], r.sparse.val[j]);
  }
  return h;
}

// What all ranks of one run share (the reference sums, per-rank results).
struct Shared {
  explicit Shared(const SimConfig& c)
      : cfg(c),
        sync(c.ranks),
        sum(c.elements),
        abs_sum(c.elements),
        hashes(c.ranks),
        clocks(c.ranks),
        stats(c.ranks),
        errors(c.ranks) {}
  const SimConfig& cfg;
  std::barrier<> sync;
  std::mutex mu;
  std::vector<double> sum, abs_sum;  // reference: sum of contributions, sum of magnitudes
  std::vector<uint64_t> hashes;
  std::vector<double> clocks;
  std::vector<collectives::CallStats> stats;
  std::vector<absl::Status> errors;
  std::atomic<bool> failed{false};
  bool exact = false;
  SimOutcome out;
};

// Rank 0 only, after every rank has run call `it`: checks the invariants and
// books the call's time and bytes.
void CheckCall(Shared& sh, const collectives::AllreduceResult& result0, int it) {
  const int p = sh.cfg.ranks;
  SimOutcome& o = sh.out;
  for (int r = 1; r < p; ++r) o.consistent = o.consistent && sh.hashes[r] == sh.hashes[0];
  std::vector<float> dense(sh.cfg.elements);
  result0.ToDense(dense);
  // Float sums of up to P terms in any order, plus residual updates.
  const double rel = sh.exact ? 0.0 : (p + 8) * std::ldexp(1.0, -23);
  for (size_t i = 0; i < dense.size(); ++i) {
    const double err = std::fabs(static_cast<double>(dense[i]) - sh.sum[i]);
    o.max_conservation_err = std::max(o.max_conservation_err, err);
    if (err > rel * sh.abs_sum[i]) o.conserved = false;
  }
  std::fill(sh.sum.begin(), sh.sum.end(), 0.0);
  std::fill(sh.abs_sum.begin(), sh.abs_sum.end(), 0.0);
  const double t = *std::max_element(sh.clocks.begin(), sh.clocks.end());
  o.time_mean_s += t / sh.cfg.iters;
  o.time_last_s = t;
  o.sent_max = o.recv_max = o.messages_max = 0;
  o.sent_mean = o.recv_mean = 0;
  for (const collectives::CallStats& s : sh.stats) {
    o.sent_max = std::max(o.sent_max, s.sent_bytes);
    o.recv_max = std::max(o.recv_max, s.recv_bytes);
    o.messages_max = std::max(o.messages_max, s.messages_sent);
    o.sent_mean += static_cast<double>(s.sent_bytes) / p;
    o.recv_mean += static_cast<double>(s.recv_bytes) / p;
  }
  o.result_nnz = result0.CountNonZeros();
  o.result_capacity = sh.stats[0].result_capacity;
  (void)it;
}

void RankMain(Shared& sh, transport::Transport& t, collectives::SparseAllreduce& algo) {
  const SimConfig& c = sh.cfg;
  const int r = t.rank();
  const size_t n = c.elements;
  std::vector<float> grad(n), residual(n, 0.0f), residual_in(n);
  collectives::AllreduceOptions options;
  options.density = c.density;
  options.teams = c.teams;
  for (int it = 0; it < c.iters; ++it) {
    bench::GenerateGradient(c.seed, r, it, c.integer, grad);
    residual_in = residual;
    collectives::AllreduceResult result;
    collectives::CallContext ctx{&t,
                                 /*job_id=*/1,
                                 /*epoch=*/1,
                                 /*call_id=*/static_cast<uint64_t>(it),
                                 transport::DeadlineIn(std::chrono::milliseconds(c.deadline_ms)),
                                 /*training_step=*/static_cast<uint64_t>(it)};
    sh.sync.arrive_and_wait();  // the previous call is over everywhere
    transport::SimResetClock(t, 0);
    absl::Status st = algo.Run(ctx, options, grad, residual, &result, &sh.stats[r]);
    sh.clocks[r] = transport::SimNow(t);
    if (!st.ok()) {
      // The owner of a failed call gives the transport up (peers fail now).
      t.Abort(transport::DeadlineIn(std::chrono::milliseconds(500)));
      sh.errors[r] = st;
      sh.failed = true;
    } else {
      sh.hashes[r] = HashResult(result);
      std::lock_guard<std::mutex> lock(sh.mu);
      // What error feedback's coefficient removed (COVAP) left the exchange too.
      const bool decays = !result.decayed.empty();
      for (size_t i = 0; i < n; ++i) {
        const double g = grad[i], in = residual_in[i], out = residual[i];
        const double gone = decays ? result.decayed[i] : 0.0;
        sh.sum[i] += g + in - out - gone;
        sh.abs_sum[i] += std::fabs(g) + std::fabs(in) + std::fabs(out) + std::fabs(gone);
      }
    }
    sh.sync.arrive_and_wait();
    if (sh.failed) return;  // every rank sees the same flag after the barrier
    if (r == 0) CheckCall(sh, result, it);
    sh.sync.arrive_and_wait();
  }
}

}  // namespace

absl::StatusOr<SimOutcome> RunSim(const SimConfig& config) {
  if (config.ranks < 1) return absl::InvalidArgumentError("ranks must be >= 1");
  if (config.iters < 1) return absl::InvalidArgumentError("iters must be >= 1");
  std::vector<std::unique_ptr<collectives::SparseAllreduce>> algos;
  for (int r = 0; r < config.ranks; ++r) {
    absl::StatusOr<std::unique_ptr<collectives::SparseAllreduce>> a =
        collectives::CreateAllreduce(config.algo);
    if (!a.ok()) return a.status();
    algos.push_back(std::move(*a));
  }
  auto shared = std::make_unique<Shared>(config);
  shared->exact = config.integer && algos[0]->traits().exact_on_integers;
  std::vector<std::unique_ptr<transport::Transport>> world =
      transport::CreateSimTransports(config.ranks, config.params);
  std::vector<std::thread> threads;
  threads.reserve(config.ranks);
  for (int r = 0; r < config.ranks; ++r) {
    threads.emplace_back([&, r] { RankMain(*shared, *world[r], *algos[r]); });
  }
  for (std::thread& th : threads) th.join();
  if (shared->failed) {
    for (int r = 0; r < config.ranks; ++r) {
      if (!shared->errors[r].ok()) {
        return absl::Status(shared->errors[r].code(), absl::StrCat(config.algo, ": rank ", r, ": ",
                                                                   shared->errors[r].message()));
      }
    }
  }
  return shared->out;
}

uint64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

}  // namespace gradex::sim
