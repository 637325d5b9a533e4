// gradex-dgs-bench: DGS worker steps through gradex's C++ path (DgsPushPull
// and DgsServer over LoopbackTransport: ranks as threads of one process,
// messages copied between them, as shared-memory MPI does between
// processes), in the DGS authors' measured setting: 3 workers + 1 server, a
// 25.19M-element model in bench/train_step/model.py's 8 layers, CPU.
// A worker step = SAMomentum + top-R selection, the push, the server's apply,
// difference and secondary compression, the pull applied. Random normal
// gradients; no forward/backward. Prints per-worker medians and one JSON
// line. A measurement: nothing passes or fails on a time.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/dgs_exchange.h"
#include "collectives/dgs_layout.h"
#include "collectives/dgs_server.h"
#include "collectives/dgs_worker.h"
#include "transport/loopback_transport.h"

namespace gradex {
namespace {

struct Flags {
  int workers = 3;
  double density = 0.01;
  int steps = 8;
  int warmup = 2;
  int width = 4096;  // model.py's width: 25,185,290 elements
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](int* v) { return i + 1 < argc && (*v = std::atoi(argv[++i]), true); };
    if (a == "--workers" && next(&f->workers)) continue;
    if (a == "--steps" && next(&f->steps)) continue;
    if (a == "--warmup" && next(&f->warmup)) continue;
    if (a == "--width" && next(&f->width)) continue;
    if (a == "--density" && i + 1 < argc) {
      f->density = std::atof(argv[++i]);
      continue;
    }
    std::fprintf(stderr, "gradex-dgs-bench: unknown or incomplete flag '%s'\n", a.c_str());
    return false;
  }
  return f->workers >= 1 && f->workers <= 64 && f->steps >= 1 && f->warmup >= 0 && f->width >= 16 &&
         f->width <= 8192 && f->density > 0 && f->density <= 1;
}

double ThreadCpuS() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Run(const Flags& f) {
  const uint32_t w = static_cast<uint32_t>(f.width);
  absl::StatusOr<DgsLayout> layout =
      DgsLayout::Create({1024 * w, w, w * w, w, w * 1024, 1024, 1024 * 10, 10});
  if (!layout.ok()) {
    std::fprintf(stderr, "gradex-dgs-bench: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  const size_t n = layout->total();
  const DgsRange all{0, static_cast<uint32_t>(n)};
  auto transports = CreateLoopbackTransports(f.workers + 1);
  const int server_rank = f.workers;
  DgsServerOptions so;
  so.workers = static_cast<uint32_t>(f.workers);
  absl::StatusOr<DgsServerShard> shard = DgsServerShard::Create(*layout, 0, all, so);
  if (!shard.ok()) return 1;
  std::vector<int> worker_ranks(f.workers);
  for (int k = 0; k < f.workers; ++k) worker_ranks[k] = k;
  const DgsJob job{1, 0};
  DgsServer server(*transports[server_rank], job, *shard, worker_ranks);
  std::atomic<int> running{f.workers};
  double server_cpu_s = 0;
  std::thread serve([&] {
    const double c0 = ThreadCpuS();
    while (running.load() > 0) {
      absl::Status s = server.ServeUntil(DeadlineIn(std::chrono::milliseconds(50)));
      if (!s.ok()) std::fprintf(stderr, "server: %s\n", s.ToString().c_str());
    }
    server_cpu_s = ThreadCpuS() - c0;
  });
  std::vector<std::vector<double>> step_s(f.workers), cpu_s(f.workers);
  std::vector<uint64_t> sent(f.workers), recv(f.workers);
  std::vector<std::string> errors(f.workers);
  std::vector<std::thread> threads;
  for (int k = 0; k < f.workers; ++k) {
    threads.emplace_back([&, k] {
      DgsWorkerOptions wo;
      wo.density = static_cast<float>(f.density);
      absl::StatusOr<DgsWorkerState> st = DgsWorkerState::Create(*layout, k, {all}, wo);
      std::vector<float> params(n, 0.01f * static_cast<float>(k == 0)), grad(n);
      std::mt19937 rng(k);
      std::normal_distribution<float> normal(0.0f, 0.01f);
      for (float& g : grad) g = normal(rng);
      DgsPushPull pp(*transports[k], job, {{0, server_rank}});
      const auto deadline = [] { return DeadlineIn(std::chrono::seconds(300)); };
      absl::Status s = st.ok() ? pp.Join(*st, params, deadline()) : st.status();
      for (int i = 0; s.ok() && i < f.warmup + f.steps; ++i) {
        std::rotate(grad.begin(), grad.begin() + 9973, grad.end());  // a different gradient
        DgsStepStats stats;
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = ThreadCpuS();
        s = pp.Step(*st, grad, params, 0.1f, deadline(), &stats);
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (i >= f.warmup) {
          step_s[k].push_back(dt);
          cpu_s[k].push_back(ThreadCpuS() - c0);
          sent[k] += stats.sent_bytes;
          recv[k] += stats.recv_bytes;
        }
      }
      if (!s.ok()) errors[k] = s.ToString();
      running.fetch_sub(1);
    });
  }
  for (auto& t : threads) t.join();
  serve.join();
  double worst = 0, worker_cpu = 0;
  for (int k = 0; k < f.workers; ++k) {
    if (!errors[k].empty()) {
      std::fprintf(stderr, "gradex-dgs-bench: worker %d: %s\n", k, errors[k].c_str());
      return 1;
    }
    const double med = Median(step_s[k]);
    worst = std::max(worst, med);
    worker_cpu = std::max(worker_cpu, Median(cpu_s[k]));
    std::printf(
        "worker %d: median step %.1f ms (its thread's CPU %.1f ms), push %.2f MB, pull "
        "%.2f MB per step\n",
        k, 1000 * med, 1000 * Median(cpu_s[k]), sent[k] / 1e6 / f.steps, recv[k] / 1e6 / f.steps);
  }
  double load = 0;
  if (FILE* la = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(la, "%lf", &load) != 1) load = 0;
    std::fclose(la);
  }
  // The server's CPU per push it served (hellos and warm-up steps included).
  const double pushes = static_cast<double>(server.stats().messages_in);
  const double server_cpu_per_push = pushes > 0 ? server_cpu_s / pushes : 0;
  std::printf("server: %.1f ms of CPU per message served (%.0f messages)\n",
              1000 * server_cpu_per_push, pushes);
  std::printf(
      "{\"kind\": \"gradex-loopback\", \"elements\": %zu, \"workers\": %d, \"density\": %g, "
      "\"steps\": %d, \"step_ms_median_slowest\": %.2f, \"worker_cpu_ms_median\": %.2f, "
      "\"server_cpu_ms_per_push\": %.2f, \"push_mb_per_step\": %.3f, "
      "\"pull_mb_per_step\": %.3f, \"load1\": %.2f}\n",
      n, f.workers, f.density, f.steps, 1000 * worst, 1000 * worker_cpu, 1000 * server_cpu_per_push,
      sent[0] / 1e6 / f.steps, recv[0] / 1e6 / f.steps, load);
  return 0;
}

}  // namespace
}  // namespace gradex

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: gradex-dgs-bench [--workers 3] [--density 0.01] [--steps 8] [--warmup 2] "
          "[--width 4096]\n  W worker threads + 1 server thread over LoopbackTransport; the "
          "median DGS worker step (bench/dgs/dgs_loopback_bench.cc)\n");
      return 0;
    }
  }
  gradex::Flags f;
  if (!gradex::Parse(argc, argv, &f)) {
    std::fprintf(stderr, "gradex-dgs-bench: bad flags (--help)\n");
    return 2;
  }
  return gradex::Run(f);
}
