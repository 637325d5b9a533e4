// gradex-client-pipeline: a multi-bucket step through gradex::client::Client with the
// selection/exchange pipeline on and off (ClientOptions::pipeline), ranks as
// threads of this process (embedded coordinators, in-memory rendezvous, UCX
// on loopback). The two modes are two jobs alive at once that take turns
// step by step (on-off, off-on, ...), so a loaded machine's bursts fall on
// both alike. A step issues every bucket at once (a trainer whose backward
// pass is done) and ends when every bucket's `done` has run; its time is
// the slowest rank's. Prints median and quartiles per mode. Measures; never
// judges.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/cli.h"
#include "services/client/client.h"
#include "tests/client/memory_rendezvous.h"
#include "version/version.h"

namespace gradex::client {
namespace {

struct Flags {
  int ranks = 4, buckets = 8, steps = 20, warmup = 2;
  size_t elements = 1 << 20;
  std::string algorithm = "spardl";
  double density = 0.01;
  catalog::ParamValues params;  // --param NAME=VALUE
};

constexpr char kUsage[] =
    "usage: gradex-client-pipeline [--ranks 4] [--buckets 8] [--elements 1048576]\n"
    "         [--steps 20] [--warmup 2] [--algorithm spardl] [--density 0.01]\n"
    "         [--param NAME=VALUE ...]\n"
    "A step of BUCKETS buckets of ELEMENTS floats through gradex::client::Client on RANKS ranks\n"
    "(threads of this process), with the client's selection/exchange pipeline on and off:\n"
    "two jobs at once taking turns step by step; prints step times (slowest rank) per mode.\n";

bool Parse(int argc, char** argv, Flags* f) {
  using bench::IntIn;
  return bench::ParseCli(argc, argv, "gradex-client-pipeline", kUsage,
                         {{"--ranks", IntIn(&f->ranks, 1, 64)},
                          {"--buckets", IntIn(&f->buckets, 1, 1024)},
                          {"--steps", IntIn(&f->steps, 1, 1 << 20)},
                          {"--warmup", IntIn(&f->warmup, 0, 1 << 20)},
                          {"--elements", IntIn<size_t>(&f->elements, 1, size_t{1} << 28)},
                          {"--algorithm", bench::Word(&f->algorithm)},
                          {"--density", bench::RealIn(&f->density, 0, 1)},
                          {"--param", [f](const char* v) {
                             // An algorithm parameter by catalog name; the
                             // client checks it against the catalog.
                             const std::string kv = v;
                             const size_t eq = kv.find('=');
                             if (eq == 0 || eq == std::string::npos) return false;
                             char* end = nullptr;
                             const double x = std::strtod(kv.c_str() + eq + 1, &end);
                             if (end == kv.c_str() + eq + 1 || *end != '\0') return false;
                             f->params[kv.substr(0, eq)] = x;
                             return true;
                           }}});
}

// One job's clients (one mode), ranks as threads, with its own embedded
// coordinator.
absl::StatusOr<std::vector<std::unique_ptr<Client>>> MakeJob(const Flags& f, bool pipeline,
                                                             testing::MemoryStore* store) {
  std::vector<std::unique_ptr<Client>> clients(f.ranks);
  std::vector<absl::Status> created(f.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o;
      o.job = pipeline ? "pipeline-on" : "pipeline-off";
      o.rank = r;
      o.world_size = f.ranks;
      o.algorithm = f.algorithm;
      o.density = f.density;
      o.params = f.params;
      o.dense_probe_period = 0;  // every step the same work
      o.min_compression_rate = 0;
      o.pipeline = pipeline;
      o.timeout = std::chrono::seconds(120);
      if (const char* t = std::getenv("GRADEX_TIMELINE")) {
        o.timeline_path = absl::StrCat(t, pipeline ? ".on" : ".off");
      }
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store->rendezvous());
      if (c.ok()) clients[r] = *std::move(c);
      created[r] = c.status();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : created) {
    if (!s.ok()) return s;
  }
  return clients;
}

// One step on every rank of `clients`: every bucket issued at once (copied
// from `grads` first, as a backward pass would produce it); the slowest
// rank's seconds from its first issue to its last `done`.
absl::StatusOr<double> Step(const Flags& f, std::vector<std::unique_ptr<Client>>& clients,
                            const std::vector<std::vector<std::vector<float>>>& grads,
                            std::vector<std::vector<std::vector<float>>>& data) {
  std::vector<double> seconds(f.ranks, 0.0);
  std::vector<absl::Status> failed(f.ranks);
  std::barrier sync(f.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      for (int b = 0; b < f.buckets; ++b) data[r][b] = grads[r][b];
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::future<absl::Status>> done;
      for (int b = 0; b < f.buckets; ++b) {
        auto p = std::make_shared<std::promise<absl::Status>>();
        done.push_back(p->get_future());
        clients[r]->AllreduceAsync({{static_cast<uint64_t>(b), f.elements}}, data[r][b],
                                   Memory::kHost, b + 1 == f.buckets,
                                   [p](absl::Status s) { p->set_value(s); });
      }
      for (auto& d : done) {
        absl::Status s = d.get();
        if (!s.ok() && failed[r].ok()) failed[r] = s;
      }
      seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : failed) {
    if (!s.ok()) return s;
  }
  return *std::max_element(seconds.begin(), seconds.end());
}

}  // namespace
}  // namespace gradex::client

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-client-pipeline")) return 0;
  using namespace gradex::client;
  Flags f;
  if (!Parse(argc, argv, &f)) return 2;
  std::printf("ranks %d, %d buckets of %zu floats, %s at density %g, %d steps (+%d warm-up)\n",
              f.ranks, f.buckets, f.elements, f.algorithm.c_str(), f.density, f.steps, f.warmup);
  // Both jobs live at once and take turns step by step (on-off, off-on, ...),
  // so the machine's load falls on both alike.
  // Ranks are threads: the clients rendezvous in memory, waiting up to 60 s.
  testing::MemoryStore stores[2] = {testing::MemoryStore(std::chrono::seconds(60)),
                                    testing::MemoryStore(std::chrono::seconds(60))};
  std::vector<std::unique_ptr<Client>> jobs[2];
  for (int m = 0; m < 2; ++m) {
    absl::StatusOr<std::vector<std::unique_ptr<Client>>> j = MakeJob(f, m == 0, &stores[m]);
    if (!j.ok()) {
      std::fprintf(stderr, "gradex-client-pipeline: %s\n",
                   std::string(j.status().message()).c_str());
      return 1;
    }
    jobs[m] = *std::move(j);
  }
  std::vector<std::vector<std::vector<float>>> grads(f.ranks), data(f.ranks);
  for (int r = 0; r < f.ranks; ++r) {
    std::mt19937 rng(1234 + r);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    grads[r].assign(f.buckets, std::vector<float>(f.elements));
    data[r].resize(f.buckets);
    for (auto& g : grads[r]) {
      for (float& x : g) x = normal(rng);
    }
  }
  std::vector<double> times[2];
  for (int step = 0; step < f.warmup + f.steps; ++step) {
    for (int k = 0; k < 2; ++k) {
      const int m = (step + k) % 2;
      absl::StatusOr<double> t = Step(f, jobs[m], grads, data);
      if (!t.ok()) {
        std::fprintf(stderr, "gradex-client-pipeline: %s\n",
                     std::string(t.status().message()).c_str());
        return 1;
      }
      if (step >= f.warmup) times[m].push_back(*t);
    }
  }
  for (int m = 0; m < 2; ++m) {
    for (int r = f.ranks - 1; r >= 0; --r) (void)jobs[m][r]->Close();
  }
  std::printf("%-9s %10s %10s %10s %10s %8s\n", "pipeline", "median_ms", "p25_ms", "p75_ms",
              "min_ms", "steps");
  for (int m = 0; m < 2; ++m) {
    std::vector<double> v = times[m];
    std::sort(v.begin(), v.end());
    std::printf("%-9s %10.2f %10.2f %10.2f %10.2f %8zu\n", m == 0 ? "on" : "off",
                1e3 * v[v.size() / 2], 1e3 * v[v.size() / 4], 1e3 * v[(3 * v.size()) / 4],
                1e3 * v.front(), v.size());
  }
  return 0;
}
