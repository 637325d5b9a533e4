// ps_worker_rank: one parameter-server worker (gradex::ps::PsWorker) as a process
// of its own, for tests/e2e/ps_test.sh: it minimises 0.5·|w − t|² over a
// 4000-element model (two layers) against an external coordinator and
// prints one line per step ("step S loss L version V staleness X") and one
// per failed step ("error after T ms: ..."), retrying failed steps (the next
// Step rejoins) until --steps have succeeded or 200 failed in a row.
// --metrics-port P serves its gradex_ps_worker_* metrics (0: any free port;
// it prints "metrics on port P").
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "ps/ps_worker.h"

int main(int argc, char** argv) {
  std::string coordinator, token_file, job = "ps";
  int rank = 0, world = 1, steps = 100, step_ms = 0, timeout_ms = 5000, metrics_port = -1;
  double density = 0.05, lr = 0.01;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    bool ok = true;
    if (a == "--coordinator")
      coordinator = v;
    else if (a == "--token-file")
      token_file = v;
    else if (a == "--job")
      job = v;
    else if (a == "--rank")
      ok = absl::SimpleAtoi(v, &rank);
    else if (a == "--world")
      ok = absl::SimpleAtoi(v, &world);
    else if (a == "--steps")
      ok = absl::SimpleAtoi(v, &steps);
    else if (a == "--step-ms")
      ok = absl::SimpleAtoi(v, &step_ms);
    else if (a == "--timeout-ms")
      ok = absl::SimpleAtoi(v, &timeout_ms);
    else if (a == "--metrics-port")
      ok = absl::SimpleAtoi(v, &metrics_port) && metrics_port >= -1 && metrics_port <= 65535;
    else if (a == "--density")
      ok = absl::SimpleAtod(v, &density);
    else if (a == "--lr")
      ok = absl::SimpleAtod(v, &lr);
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "ps_worker_rank: bad flag %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  std::ifstream in(token_file);
  std::stringstream token;
  token << in.rdbuf();
  gradex::ps::PsWorkerOptions o;
  o.client.job = job;
  o.client.rank = rank;
  o.client.world_size = world;
  o.client.coordinator = coordinator;
  o.client.token = std::string(absl::StripAsciiWhitespace(token.str()));
  o.client.timeout = std::chrono::milliseconds(timeout_ms);
  o.client.metrics_port = metrics_port;
  o.layer_sizes = {3000, 1000};
  o.density = static_cast<float>(density);
  auto w = gradex::ps::PsWorker::Create(o);
  if (!w.ok()) {
    std::fprintf(stderr, "ps_worker_rank: %s\n", w.status().ToString().c_str());
    return 1;
  }
  if (metrics_port >= 0) {
    std::printf("metrics on port %d\n", (*w)->metrics_port());
    std::fflush(stdout);
  }
  const size_t n = 4000;
  std::vector<float> params(n, 0.f), target(n), grad(n);
  for (size_t i = 0; i < n; ++i) target[i] = std::sin(0.01f * static_cast<float>(i)) + 0.5f;
  int done = 0, failed_in_a_row = 0;
  while (done < steps) {
    double loss = 0;
    for (size_t i = 0; i < n; ++i) {
      grad[i] = params[i] - target[i];
      loss += 0.5 * grad[i] * grad[i];
    }
    loss /= static_cast<double>(n);
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = (*w)->Step(grad, params, static_cast<float>(lr));
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (!s.ok()) {
      std::printf("error after %lld ms: %s\n", static_cast<long long>(ms), s.ToString().c_str());
      std::fflush(stdout);
      if (++failed_in_a_row >= 200) return 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    failed_in_a_row = 0;
    const gradex::ps::PsWorkerStats st = (*w)->Stats();
    std::printf("step %d loss %.6f version %llu staleness %llu epoch %u\n", done, loss,
                static_cast<unsigned long long>(st.version),
                static_cast<unsigned long long>(st.staleness), st.epoch);
    std::fflush(stdout);
    ++done;
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  absl::Status s = (*w)->Close();
  return s.ok() ? 0 : 1;
}
