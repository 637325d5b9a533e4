#include "bench/rank_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/gradient_gen.h"
#include "bench/stats.h"
#include "collectives/algorithms/hierarchical.h"
#include "collectives/in_band.h"
#include "collectives/invariants.h"
#include "collectives/sparse_allreduce.h"

namespace gradex::bench {
namespace {

constexpr uint64_t kJobId = 0x6e7c;  // any value: one job per run
constexpr uint32_t kEpoch = 1;

double Seconds(transport::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

absl::Status WriteF32(const std::filesystem::path& path, std::span<const float> x) {
  // x86_64 and aarch64 are little-endian, so the in-memory bytes are the format.
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(x.data()), std::streamsize(x.size() * sizeof(float)));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status Dump(const std::filesystem::path& dir, int rank, std::span<const float> input,
                  std::span<const float> residual_in, std::span<const float> residual_out,
                  std::span<const float> result) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // other ranks may race us: fine
  if (!std::filesystem::is_directory(dir)) {
    return absl::InternalError(absl::StrCat("cannot create dump directory ", dir.string()));
  }
  const std::string r = absl::StrCat("rank", rank);
  for (auto [name, x] : {std::pair{"_input.f32", input},
                         {"_residual_in.f32", residual_in},
                         {"_residual_out.f32", residual_out},
                         {"_result.f32", result}}) {
    if (auto s = WriteF32(dir / absl::StrCat(r, name), x); !s.ok()) return s;
  }
  return absl::OkStatus();
}

class Progress {
 public:
  explicit Progress(bool on) : on_(on), last_(transport::Clock::now()) {}
  void Call(const std::string& algo, int i, int total, double s) {
    if (!on_ || transport::Clock::now() - last_ < std::chrono::seconds(2)) return;
    last_ = transport::Clock::now();
    std::fprintf(stderr, "[gradex-bench] %s: call %d/%d took %.3f s\n", algo.c_str(), i + 1, total,
                 s);
  }

 private:
  bool on_;
  transport::Clock::time_point last_;
};

// The stages' bytes and seconds vary from call to call (the inner
// algorithm's volume is data dependent): the per-call figure the table
// prints is their median over the timed calls, not the last call's.
bool PerCallDetail(const std::string& name) {
  return absl::StartsWith(name, "intra_node_") || absl::StartsWith(name, "inter_node_");
}

}  // namespace

absl::Status RunRank(const BenchFlags& flags, const std::vector<std::string>& algos,
                     transport::Transport& transport, const ReportSink& sink,
                     const std::function<void(uint64_t)>& before_call) {
  const int rank = transport.rank();
  const size_t n = flags.elements;
  const auto call_budget = std::chrono::milliseconds(flags.deadline_ms);
  collectives::InBand in_band(transport);
  Progress progress(rank == 0 && !flags.quiet);
  uint64_t step = 0;  // unique per call on this transport, identical on every rank

  std::vector<float> grad(n), residual(n), residual_in(n), result_dense(n);
  for (const std::string& algo : algos) {
    RankAlgoReport rep;
    rep.rank = rank;
    rep.algo = algo;
    rep.teams = TeamsFor(algo, flags);
    rep.skip_note = SkipReason(algo, flags);
    if (!rep.skip_note.empty()) {
      sink(rep);
      continue;
    }
    auto fail = [&](const absl::Status& s) {
      // The transport's state is unknown now: give it up, so peers still
      // waiting on this rank fail fast rather than at their deadline.
      transport.Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
      rep.error = s.ToString();
      sink(rep);
      return s;
    };
    auto created = collectives::CreateAllreduce(algo);
    if (!created.ok()) return fail(created.status());
    std::unique_ptr<collectives::SparseAllreduce> owned = *std::move(created);
    if (FlatReasonFor(algo, flags).empty()) {
      auto wrapped = collectives::algorithms::HierarchicalAllreduce::Create(std::move(owned),
                                                                            LayoutFor(flags));
      if (!wrapped.ok()) return fail(wrapped.status());
      owned = *std::move(wrapped);
    }
    collectives::SparseAllreduce& alg = *owned;

    collectives::AllreduceOptions opts;
    opts.density = flags.density;
    opts.threshold_reuse = flags.threshold_reuse;
    opts.teams = rep.teams;
    if (const catalog::AlgorithmSpec* spec = catalog::Find(algo)) {
      for (const auto& [name, value] : flags.params) {
        if (catalog::FindParam(*spec, name) != nullptr) opts.params[name] = value;
      }
    }
    std::fill(residual.begin(), residual.end(), 0.0f);
    collectives::AllreduceResult result;
    collectives::CallStats stats;
    std::map<std::string, std::vector<double>> per_call;  // PerCallDetail, timed calls
    const int total = flags.warmup + flags.iters;
    for (int it = 0; it < total; ++it) {
      const bool last = it == total - 1;
      GenerateGradient(flags.seed, rank, static_cast<uint64_t>(it), flags.integer, grad);
      if (last) residual_in = residual;
      // Align the start of every call so the slowest rank's time is the call's time.
      if (auto s = in_band.Barrier(transport::DeadlineIn(call_budget)); !s.ok()) return fail(s);
      collectives::CallContext ctx;
      ctx.transport = &transport;
      ctx.job_id = kJobId;
      ctx.epoch = kEpoch;
      ctx.call_id = step++;
      ctx.training_step = ctx.call_id;  // one bucket: a call per step
      ctx.deadline = transport::DeadlineIn(call_budget);
      if (before_call) before_call(ctx.call_id);
      stats = collectives::CallStats();
      const auto t0 = transport::Clock::now();
      absl::Status s = alg.Run(ctx, opts, grad, residual, &result, &stats);
      const double took = Seconds(transport::Clock::now() - t0);
      if (!s.ok()) {
        return fail(absl::Status(
            s.code(), absl::StrCat(algo, " call ", it, " on rank ", rank, ": ", s.message())));
      }
      progress.Call(algo, it, total, took);
      if (it < flags.warmup) continue;
      rep.call_s.push_back(took);
      rep.selection_s.push_back(stats.phases.selection_s);
      rep.communication_s.push_back(stats.phases.communication_s);
      rep.reduction_s.push_back(stats.phases.reduction_s);
      rep.sent_bytes.push_back(stats.sent_bytes);
      rep.recv_bytes.push_back(stats.recv_bytes);
      for (const auto& [name, value] : stats.details) {
        if (PerCallDetail(name)) per_call[name].push_back(value);
      }
    }

    rep.details.assign(stats.details.begin(), stats.details.end());
    for (auto& [name, value] : rep.details) {
      if (auto it = per_call.find(name); it != per_call.end()) value = Median(it->second);
    }
    // Invariants on the last call.
    result.ToDense(result_dense);
    rep.result_nnz = result.CountNonZeros();
    rep.result_capacity = stats.result_capacity;
    const size_t entries = result.is_dense ? rep.result_nnz : result.sparse.nnz();
    rep.bounds_ok = entries <= stats.result_capacity;
    rep.result_hash = collectives::HashFloats(result_dense);
    auto consistent =
        collectives::CheckConsistency(in_band, rep.result_hash, transport::DeadlineIn(call_budget));
    if (!consistent.ok()) return fail(consistent.status());
    rep.consistent = *consistent;

    if (!flags.dump_dir.empty()) {
      std::filesystem::path dir(flags.dump_dir);
      if (algos.size() > 1) dir /= algo;
      if (auto s = Dump(dir, rank, grad, residual_in, residual, result_dense); !s.ok()) {
        return fail(s);
      }
    }
    // residual_in and grad are no longer needed: they become scratch.
    collectives::CallContext ctx;
    ctx.transport = &transport;
    ctx.job_id = kJobId;
    ctx.epoch = kEpoch;
    ctx.call_id = step++;
    ctx.training_step = ctx.call_id;
    ctx.deadline = transport::DeadlineIn(call_budget);
    auto cons = collectives::CheckConservation(ctx, grad, residual_in, residual, result_dense, grad,
                                               residual_in, result.decayed);
    if (!cons.ok()) return fail(cons.status());
    rep.conservation_checked = true;
    rep.conservation_max_abs_err = cons->max_abs_err;
    rep.max_abs_sum = cons->scale();  // the tolerance's scale (invariants.h)
    sink(rep);
  }
  return absl::OkStatus();
}

}  // namespace gradex::bench
