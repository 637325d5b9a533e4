// gradex-client-pipeline: a multi-bucket step through gradex::Client with the
// selection/exchange pipeline on and off (ClientOptions::pipeline), ranks as
// threads of this process (embedded coordinator, in-memory rendezvous, UCX on
// loopback), the modes interleaved round by round. A step issues every
// bucket at once (a trainer whose backward pass is done) and ends when every
// bucket's `done` has run; its time is the slowest rank's. Prints the median
// step time per mode and round, and over all rounds. Measures; never judges.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/client/client.h"

namespace gradex::client {
namespace {

struct Flags {
  int ranks = 4, buckets = 8, steps = 10, warmup = 2, rounds = 3;
  size_t elements = 1 << 20;
  std::string algorithm = "spardl";
  double density = 0.01;
};

constexpr char kUsage[] =
    "usage: gradex-client-pipeline [--ranks 4] [--buckets 8] [--elements 1048576]\n"
    "         [--steps 10] [--warmup 2] [--rounds 3] [--algorithm spardl] [--density 0.01]\n"
    "A step of BUCKETS buckets of ELEMENTS floats through gradex::Client on RANKS ranks\n"
    "(threads of this process), with the client's selection/exchange pipeline on and off,\n"
    "interleaved round by round; prints median step times (slowest rank) per mode.\n";

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    bool ok = true;
    if (a == "--ranks")
      ok = absl::SimpleAtoi(v, &f->ranks) && f->ranks >= 1 && f->ranks <= 64;
    else if (a == "--buckets")
      ok = absl::SimpleAtoi(v, &f->buckets) && f->buckets >= 1 && f->buckets <= 1024;
    else if (a == "--steps")
      ok = absl::SimpleAtoi(v, &f->steps) && f->steps >= 1;
    else if (a == "--warmup")
      ok = absl::SimpleAtoi(v, &f->warmup) && f->warmup >= 0;
    else if (a == "--rounds")
      ok = absl::SimpleAtoi(v, &f->rounds) && f->rounds >= 1;
    else if (a == "--elements")
      ok =
          absl::SimpleAtoi(v, &f->elements) && f->elements >= 1 && f->elements <= (size_t{1} << 28);
    else if (a == "--algorithm")
      f->algorithm = v;
    else if (a == "--density")
      ok = absl::SimpleAtod(v, &f->density) && f->density > 0 && f->density <= 1;
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "gradex-client-pipeline: bad %s '%s'\n%s", a.c_str(), v, kUsage);
      return false;
    }
  }
  return true;
}

class Store {
 public:
  Rendezvous rendezvous() {
    Rendezvous r;
    r.set = [this](const std::string& k, const std::string& v) {
      absl::MutexLock lock(&mu_);
      values_[k] = v;
      return absl::OkStatus();
    };
    r.get = [this](const std::string& k) -> absl::StatusOr<std::string> {
      absl::MutexLock lock(&mu_);
      auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(k) > 0; };
      if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(60))) {
        return absl::DeadlineExceededError(absl::StrCat("store: no '", k, "'"));
      }
      return values_[k];
    };
    return r;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One round of one mode: the step times (seconds, slowest rank) after warm-up.
absl::StatusOr<std::vector<double>> Round(const Flags& f, bool pipeline) {
  Store store;
  std::vector<std::unique_ptr<Client>> clients(f.ranks);
  std::vector<absl::Status> created(f.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o;
      o.job = "client-pipeline-bench";
      o.rank = r;
      o.world_size = f.ranks;
      o.algorithm = f.algorithm;
      o.density = f.density;
      o.dense_probe_period = 0;  // every step the same work
      o.min_compression_rate = 0;
      o.pipeline = pipeline;
      o.timeout = std::chrono::seconds(120);
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous());
      if (c.ok()) clients[r] = *std::move(c);
      created[r] = c.status();
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (const absl::Status& s : created) {
    if (!s.ok()) return s;
  }
  const int total = f.warmup + f.steps;
  std::vector<std::vector<double>> times(f.ranks, std::vector<double>(total, 0.0));
  std::vector<absl::Status> failed(f.ranks);
  std::barrier sync(f.ranks);
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(1234 + r);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<std::vector<float>> grads(f.buckets, std::vector<float>(f.elements));
      for (auto& g : grads) {
        for (float& x : g) x = normal(rng);
      }
      std::vector<std::vector<float>> data(f.buckets);
      for (int step = 0; step < total; ++step) {
        for (int b = 0; b < f.buckets; ++b) data[b] = grads[b];  // the trainer's backward
        sync.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::future<absl::Status>> done;
        for (int b = 0; b < f.buckets; ++b) {
          auto p = std::make_shared<std::promise<absl::Status>>();
          done.push_back(p->get_future());
          clients[r]->AllreduceAsync({{static_cast<uint64_t>(b), f.elements}}, data[b],
                                     Memory::kHost, b + 1 == f.buckets,
                                     [p](absl::Status s) { p->set_value(s); });
        }
        for (auto& d : done) {
          absl::Status s = d.get();
          if (!s.ok() && failed[r].ok()) failed[r] = s;
        }
        times[r][step] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = f.ranks - 1; r >= 0; --r) (void)clients[r]->Close();
  for (const absl::Status& s : failed) {
    if (!s.ok()) return s;
  }
  std::vector<double> steps;
  for (int step = f.warmup; step < total; ++step) {
    double slowest = 0;
    for (int r = 0; r < f.ranks; ++r) slowest = std::max(slowest, times[r][step]);
    steps.push_back(slowest);
  }
  return steps;
}

}  // namespace
}  // namespace gradex::client

int main(int argc, char** argv) {
  using namespace gradex::client;
  Flags f;
  if (!Parse(argc, argv, &f)) return 2;
  std::printf("ranks %d, %d buckets of %zu floats, %s at density %g, %d steps (+%d warm-up)\n",
              f.ranks, f.buckets, f.elements, f.algorithm.c_str(), f.density, f.steps, f.warmup);
  std::printf("%-6s %-9s %12s %12s %12s\n", "round", "pipeline", "median_ms", "min_ms", "max_ms");
  std::map<bool, std::vector<double>> all;
  for (int round = 0; round < f.rounds; ++round) {
    for (bool pipeline : {true, false}) {
      absl::StatusOr<std::vector<double>> steps = Round(f, pipeline);
      if (!steps.ok()) {
        std::fprintf(stderr, "gradex-client-pipeline: %s\n",
                     std::string(steps.status().message()).c_str());
        return 1;
      }
      all[pipeline].insert(all[pipeline].end(), steps->begin(), steps->end());
      std::printf("%-6d %-9s %12.2f %12.2f %12.2f\n", round, pipeline ? "on" : "off",
                  1e3 * Median(*steps), 1e3 * *std::min_element(steps->begin(), steps->end()),
                  1e3 * *std::max_element(steps->begin(), steps->end()));
      std::fflush(stdout);
    }
  }
  std::printf("all    on        %12.2f   (%zu steps)\n", 1e3 * Median(all[true]), all[true].size());
  std::printf("all    off       %12.2f   (%zu steps)\n", 1e3 * Median(all[false]),
              all[false].size());
  return 0;
}
