// gradex-coordinator-overhead: the control plane's cost on step time. One
// process runs P agents (threads, UCX between them) twice per round, in
// alternation: once with an in-memory control plane (no gRPC, no network:
// the plan is a pointer, reports a queue) and once against a real
// coordinator on loopback gRPC (plan stream, heartbeats, a report per step).
// Everything else is the same: agent runtime, algorithm, gradients, UCX.
// Prints each arm's median and p90 step time (a step's time is its slowest
// rank's) and the difference of the medians. Wall-time differences between
// arms are at the noise floor of a shared 2-core machine (about +-10% per
// round), so it also prints two quantities that are not: the process CPU
// time per step of each arm (their difference is everything the control
// plane, the in-process coordinator included, made the machine do), and the
// time a step spends in the control plane itself (LatestPlan + ReportStep,
// timed in a loop). Their ratio to the step time bounds the overhead where
// agents do not share cores with the control plane.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "member/data_interface.h"
#include "member/grpc_control_plane.h"
#include "member/transport_provider.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "services/coordinator/server.h"
#include "tests/fakes/fake_control_plane.h"
#include "version/version.h"

namespace gradex::bench {
namespace {

constexpr char kToken[] = "coordinator-overhead-token";

struct Config {
  int agents = 4, teams = 2, steps = 60, warmup = 5, rounds = 3;
  size_t elements = 4000000;
  double density = 0.01;
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

struct ArmResult {
  std::vector<double> steps_ms;  // slowest rank per step, after warmup
  double cpu_ms_per_step = 0;    // whole process, all steps of the arm
  // CPU of every thread but the agents' own (which spin in UCX progress while
  // they wait, so their CPU follows wall time, not work): the gRPC threads,
  // the in-process coordinator, UCX's async thread. What the control plane
  // takes from the cores the steps run on.
  double other_cpu_ms_per_step = 0;
  double in_step_us = 0;  // median LatestPlan + ReportStep (gRPC arm)
};

// What a step does with the control plane, timed: a pointer copy of the
// latest plan and a non-blocking report (enqueued or dropped).
double InStepMicros(member::ControlPlane* control) {
  std::vector<double> us;
  for (int i = 0; i < 2000; ++i) {
    member::StepReport r;
    r.step = 1000000 + i;
    auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const member::Plan> p = control->LatestPlan();
    control->ReportStep(std::move(r));
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (p == nullptr) return -1;
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Step times (slowest rank per step, after warmup), or empty on failure.
ArmResult RunArm(const Config& c, bool grpc) {
  // Process CPU over the timed steps only (rank 0's view of their start and
  // end; ranks run in lockstep), so joins and teardown do not count.
  std::atomic<double> cpu_start{0}, cpu_end{0};
  std::vector<double> agent_cpu(c.agents, 0.0);  // each agent thread's, timed steps
  ArmResult res;
  std::unique_ptr<coordinator::CoordinatorServer> server;
  std::unique_ptr<testing::FakeCoordinator> fake;
  if (grpc) {
    coordinator::JobSettings job;
    job.job_id = "overhead";
    job.world_size = c.agents;
    job.min_world_size = c.agents;
    job.algorithm = std::string(catalog::DefaultAlgorithm());
    job.density = c.density;
    job.teams = c.teams;
    // The coordinator's k' controller would change B-SAG's (the default's)
    // work; both arms run the algorithm's own controller, so only the control
    // plane differs.
    job.coordinate_kprime = false;
    coordinator::ServerOptions so;
    so.listen = "127.0.0.1:0";
    so.token = kToken;
    auto s = coordinator::CoordinatorServer::Start(job, so);
    if (!s.ok()) {
      std::fprintf(stderr, "coordinator: %s\n", std::string(s.status().message()).c_str());
      return res;
    }
    server = std::move(*s);
  } else {
    testing::FakeJobConfig fc;
    fc.job = "overhead";
    fc.token = kToken;
    fc.world_size = c.agents;
    fc.lease = std::chrono::milliseconds(10000);
    fc.base.algorithm = std::string(catalog::DefaultAlgorithm());
    fc.base.density = c.density;
    fc.base.teams = c.teams;
    fake = std::make_unique<testing::FakeCoordinator>(fc);
  }
  std::vector<std::vector<double>> times(c.agents);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  uint64_t sent0 = 0;  // bytes rank 0 sent: the arms must do the same work
  for (int i = 0; i < c.agents; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<member::ControlPlane> control;
      if (grpc) {
        member::GrpcControlPlaneOptions g;
        g.target = absl::StrCat("127.0.0.1:", server->port());
        auto cp = member::CreateGrpcControlPlane(g);
        if (!cp.ok()) return (void)failures.fetch_add(1);
        control = std::move(*cp);
      } else {
        control = std::make_unique<testing::FakeControlPlane>(fake.get());
      }
      transport::ucx::UcxOptions ucx;
      ucx.listen_ip = member::DataIpFromEnvironment();
      auto transports = member::CreateUcxProvider(ucx);
      if (!transports.ok()) return (void)failures.fetch_add(1);
      pipeline::AgentMetrics metrics;
      pipeline::AgentOptions o;
      o.job = "overhead";
      o.token = kToken;
      o.agent_id = absl::StrCat("agent-", i);
      o.host = "localhost";
      o.local_rank = i;
      o.elements = c.elements;
      pipeline::Agent agent(o, control.get(), transports->get(), &metrics);
      if (!agent.Start().ok()) return (void)failures.fetch_add(1);
      pipeline::WholeStep whole(&agent);
      std::vector<float> grad(c.elements);
      std::mt19937 rng(1234 + i);
      std::normal_distribution<float> nd;
      for (float& v : grad) v = nd(rng);
      std::vector<std::span<const float>> spans{grad};
      while (agent.next_step() < static_cast<uint64_t>(c.steps)) {
        pipeline::StepOutcome out;
        if (absl::Status s = whole.Run(spans, &out); !s.ok()) {
          std::fprintf(stderr, "agent %d: %s\n", i, std::string(s.message()).c_str());
          failures.fetch_add(1);
          return;
        }
        times[i].push_back(out.seconds);
        if (agent.next_step() == static_cast<uint64_t>(c.warmup)) {
          agent_cpu[i] = -ThreadCpuSeconds();
          if (i == 0) cpu_start.store(CpuSeconds());
        }
        if (i == 0) {
          for (const collectives::CallStats& cs : out.stats) sent0 += cs.sent_bytes;
        }
      }
      agent_cpu[i] += ThreadCpuSeconds();
      if (i == 0) cpu_end.store(CpuSeconds());
      // After the timed steps, so it cannot disturb them (and a stale step
      // number makes the coordinator ignore these reports).
      if (grpc && i == 0) res.in_step_us = InStepMicros(control.get());
      (void)agent.Leave();
    });
  }
  for (auto& t : threads) t.join();
  if (server) server->Shutdown();
  res.cpu_ms_per_step = (cpu_end.load() - cpu_start.load()) * 1e3 / (c.steps - c.warmup);
  double agents_cpu = 0;
  for (double a : agent_cpu) agents_cpu += a;
  res.other_cpu_ms_per_step =
      (cpu_end.load() - cpu_start.load() - agents_cpu) * 1e3 / (c.steps - c.warmup);
  if (failures.load() > 0) return ArmResult{};
  std::printf(
      "  (%s: agent-0 sent %.0f B per step; CPU per step: process %.2f ms, outside the agents' "
      "threads %.3f ms)\n",
      grpc ? "gRPC" : "in-memory", static_cast<double>(sent0) / c.steps, res.cpu_ms_per_step,
      res.other_cpu_ms_per_step);
  for (int s = c.warmup; s < c.steps; ++s) {
    double m = 0;
    for (auto& t : times) m = std::max(m, t[s]);
    res.steps_ms.push_back(m * 1e3);
  }
  return res;
}

double Pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace
}  // namespace gradex::bench

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-coordinator-overhead")) return 0;
  using namespace gradex::bench;
  Config c;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int v = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &v) || v < 1) {
      std::fprintf(stderr, "bad value for %s\n", a.c_str());
      return 2;
    }
    if (a == "--steps")
      c.steps = v + c.warmup;
    else if (a == "--elements")
      c.elements = v;
    else if (a == "--rounds")
      c.rounds = v;
    else {
      std::fprintf(stderr,
                   "usage: gradex-coordinator-overhead [--steps S] [--elements N] [--rounds R]\n");
      return 2;
    }
  }
  std::printf("%d agents, %s, %d teams, N=%zu, density %g, %d timed steps per arm\n", c.agents,
              std::string(gradex::catalog::DefaultAlgorithm()).c_str(), c.teams, c.elements,
              c.density, c.steps - c.warmup);
  std::vector<double> all_off, all_on, cpu_off, cpu_on, other_off, other_on, in_step, paired;
  for (int r = 0; r < c.rounds; ++r) {
    double med[2] = {0, 0};
    // Alternate which arm goes first, so an order effect cancels out.
    for (bool grpc : {r % 2 == 1, r % 2 == 0}) {
      ArmResult a = RunArm(c, grpc);
      const std::vector<double>& t = a.steps_ms;
      if (t.empty()) return 1;
      (grpc ? cpu_on : cpu_off).push_back(a.cpu_ms_per_step);
      (grpc ? other_on : other_off).push_back(a.other_cpu_ms_per_step);
      if (grpc) in_step.push_back(a.in_step_us);
      med[grpc] = Pct(t, 0.5);
      std::printf("round %d %-28s median %8.2f ms  p90 %8.2f ms\n", r,
                  grpc ? "coordinator (gRPC):" : "in-memory control plane:", Pct(t, 0.5),
                  Pct(t, 0.9));
      std::fflush(stdout);
      (grpc ? all_on : all_off).insert((grpc ? all_on : all_off).end(), t.begin(), t.end());
    }
    paired.push_back(100.0 * (med[1] - med[0]) / med[0]);
  }
  double off = Pct(all_off, 0.5), on = Pct(all_on, 0.5);
  std::printf("all rounds: in-memory median %.2f ms, coordinator median %.2f ms: %+.1f%%\n", off,
              on, 100.0 * (on - off) / off);
  std::printf("per-round difference of medians: median %+.1f%%, range %+.1f%% .. %+.1f%%\n",
              Pct(paired, 0.5), Pct(paired, 0.0), Pct(paired, 1.0));
  // The agents' threads spin while they wait, so process CPU follows wall
  // time; the CPU outside them is the control plane's own work.
  std::printf("process CPU per step (median over rounds): in-memory %.2f ms, coordinator %.2f ms\n",
              Pct(cpu_off, 0.5), Pct(cpu_on, 0.5));
  const double dother = Pct(other_on, 0.5) - Pct(other_off, 0.5);
  std::printf(
      "CPU outside the agents' threads per step: in-memory %.3f ms, coordinator %.3f ms: the "
      "control plane (coordinator included) adds %+.3f ms = %+.2f%% of a step\n",
      Pct(other_off, 0.5), Pct(other_on, 0.5), dother, 100.0 * dother / off);
  std::printf("in the step: LatestPlan + ReportStep median %.2f us = %.4f%% of the step\n",
              Pct(in_step, 0.5), 100.0 * Pct(in_step, 0.5) * 1e-3 / off);
  return 0;
}
