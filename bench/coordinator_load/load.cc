#include "bench/coordinator_load/load.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <queue>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "catalog/catalog.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "services/coordinator/server.h"
#include "version/version.h"

namespace gradex::bench {
namespace {

using gradex::v1::Coordinator;
constexpr char kToken[] = "coordinator-load-test-token";
constexpr absl::Duration kRpcDeadline = absl::Seconds(5);

struct SimAgent {
  uint64_t member = 0;
  std::string secret;  // JoinResponse.member_secret, sent with every heartbeat
  bool silent = false;
  std::atomic<bool> in_flight{false};
  // Touched by one call's callback at a time (in_flight orders them).
  grpc::ClientContext* ctx = nullptr;
  gradex::v1::HeartbeatRequest req;
  gradex::v1::HeartbeatResponse resp;
  absl::Time sent, last_renewed;
  double max_gap_s = 0;
};

void Authorize(grpc::ClientContext* ctx) {
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
}

// CPU time of this process (client and server together).
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

double Percentile(const std::vector<float>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = std::min(sorted.size() - 1, static_cast<size_t>(q * sorted.size()));
  return sorted[i];
}

}  // namespace

std::string LoadResult::ToString() const {
  return absl::StrFormat(
      "joined %d in %.2f s (%.0f joins/s)\n"
      "heartbeats: %d ok, %d failed, %d late (%.0f/s)\n"
      "heartbeat latency: median %.0f us, p90 %.0f us, p99 %.0f us, max %.0f us\n"
      "longest gap between renewals: %.2f of the lease\n"
      "coordinator: %d members at the end, %d evictions\n"
      "process CPU while heartbeating: %.2f cores, %.0f us per heartbeat (client + server)\n",
      joined, join_seconds, join_seconds > 0 ? joined / join_seconds : 0.0, heartbeats_ok,
      heartbeats_failed, heartbeats_late, heartbeats_per_second, latency_us_median, latency_us_p90,
      latency_us_p99, latency_us_max, max_gap_over_lease, members_at_end, evictions, cpu_cores,
      cpu_us_per_heartbeat);
}

absl::StatusOr<LoadResult> RunCoordinatorLoad(const LoadOptions& opts) {
  if (opts.agents < 1 || opts.agents > 65536 || opts.silent < 0 || opts.silent > opts.agents ||
      opts.channels < 1 || opts.join_in_flight < 1) {
    return absl::InvalidArgumentError("agents 1..65536, silent 0..agents, channels >= 1");
  }
  coordinator::JobSettings job;
  job.job_id = "load";
  job.world_size = opts.agents;
  job.min_world_size = opts.agents;
  job.algorithm = std::string(catalog::DefaultAlgorithm());
  job.lease = opts.lease;
  job.rendezvous_timeout = absl::Hours(1);
  coordinator::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.token = kToken;
  auto server = coordinator::CoordinatorServer::Start(job, so);
  if (!server.ok()) return server.status();
  const std::string target = absl::StrCat("127.0.0.1:", (*server)->port());

  // Separate connections: a local subchannel pool per channel.
  std::vector<std::unique_ptr<Coordinator::Stub>> stubs;
  for (int c = 0; c < opts.channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(Coordinator::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  auto stub_of = [&](int i) -> Coordinator::Stub& { return *stubs[i % stubs.size()]; };

  std::vector<std::unique_ptr<SimAgent>> agents;
  for (int i = 0; i < opts.agents; ++i) {
    agents.push_back(std::make_unique<SimAgent>());
    agents.back()->silent = i < opts.silent;
  }

  absl::Mutex mu;
  // (due, agent): the next heartbeat of each agent, fixed rate from its join.
  using Due = std::pair<absl::Time, int>;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due;
  std::vector<float> latencies;
  int joins_in_flight = 0;
  int joined = 0;
  int join_errors = 0;
  std::string first_error;
  std::atomic<uint64_t> hb_ok{0}, hb_failed{0}, hb_late{0};
  std::atomic<int> hb_in_flight{0};
  absl::Duration interval = opts.lease / 3;

  // Joins, at most join_in_flight at once; each agent starts heartbeating
  // one interval after its own join, as a real agent does.
  const absl::Time join_start = absl::Now();
  std::vector<std::unique_ptr<grpc::ClientContext>> join_ctx(opts.agents);
  std::vector<gradex::v1::JoinRequest> join_req(opts.agents);
  std::vector<gradex::v1::JoinResponse> join_resp(opts.agents);
  for (int i = 0; i < opts.agents; ++i) {
    {
      absl::MutexLock l(&mu);
      auto room = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
        return joins_in_flight < opts.join_in_flight;
      };
      if (!mu.AwaitWithTimeout(absl::Condition(&room), absl::Seconds(30))) {
        return absl::DeadlineExceededError("joins stopped completing");
      }
      ++joins_in_flight;
    }
    gradex::v1::JoinRequest& r = join_req[i];
    r.set_job_id("load");
    r.set_agent_id(absl::StrCat("sim-", i));
    // A host (node) of its own each: a node is the failure unit, and a
    // silent agent's node-mates would be evicted with it; this load is about
    // leases, each silent agent the one eviction it causes.
    r.set_host(absl::StrCat("loadhost-", i));
    r.set_local_rank(0);
    r.set_device("cpu");
    r.set_ucx_address(absl::StrCat("10.", i / 65536 % 256, ".", i / 256 % 256, ".", i % 256,
                                   ":40000"));  // a data-plane listener
    r.set_ucx_version("1.13");
    r.set_wire_protocol(gradex::version::kWireProtocol);
    r.set_ucx_transports("tcp");
    join_ctx[i] = std::make_unique<grpc::ClientContext>();
    Authorize(join_ctx[i].get());
    stub_of(i).async()->Join(join_ctx[i].get(), &join_req[i], &join_resp[i],
                             [&, i](grpc::Status st) {
                               absl::MutexLock l(&mu);
                               --joins_in_flight;
                               if (!st.ok()) {
                                 if (join_errors++ == 0) first_error = st.error_message();
                                 return;
                               }
                               ++joined;
                               SimAgent& a = *agents[i];
                               a.member = join_resp[i].member_id();
                               a.secret = join_resp[i].member_secret();
                               a.last_renewed = absl::Now();
                               if (!a.silent) due.push({a.last_renewed + interval, i});
                             });
  }
  {
    absl::MutexLock l(&mu);
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) { return joins_in_flight == 0; };
    mu.AwaitWithTimeout(absl::Condition(&done), kRpcDeadline + absl::Seconds(5));
    if (join_errors > 0) {
      return absl::UnavailableError(absl::StrCat(join_errors, " joins failed: ", first_error));
    }
  }
  LoadResult res;
  res.join_seconds = absl::ToDoubleSeconds(absl::Now() - join_start);

  // Heartbeats until the end of the run.
  const absl::Time hb_start = absl::Now();
  const double cpu_start = ProcessCpuSeconds();
  const absl::Time stop = hb_start + opts.duration;
  for (;;) {
    Due next;
    {
      absl::MutexLock l(&mu);
      if (due.empty() || due.top().first >= stop) break;
      next = due.top();
      due.pop();
      due.push({next.first + interval, next.second});
    }
    absl::Time now = absl::Now();
    if (next.first > now) absl::SleepFor(next.first - now);
    SimAgent& a = *agents[next.second];
    if (a.in_flight.load(std::memory_order_acquire)) {
      hb_late.fetch_add(1);
      continue;
    }
    a.in_flight.store(true, std::memory_order_relaxed);
    delete a.ctx;
    a.ctx = new grpc::ClientContext();
    Authorize(a.ctx);
    a.req.set_member_id(a.member);
    a.req.set_member_secret(a.secret);
    a.sent = absl::Now();
    hb_in_flight.fetch_add(1);
    stub_of(next.second).async()->Heartbeat(a.ctx, &a.req, &a.resp, [&, ap = &a](grpc::Status st) {
      absl::Time t = absl::Now();
      if (st.ok()) {
        ap->max_gap_s = std::max(ap->max_gap_s, absl::ToDoubleSeconds(t - ap->last_renewed));
        ap->last_renewed = t;
        hb_ok.fetch_add(1);
        absl::MutexLock l(&mu);
        latencies.push_back(static_cast<float>(absl::ToDoubleMicroseconds(t - ap->sent)));
      } else {
        hb_failed.fetch_add(1);
        absl::MutexLock l(&mu);
        if (first_error.empty()) first_error = st.error_message();
      }
      ap->in_flight.store(false, std::memory_order_release);
      hb_in_flight.fetch_sub(1);
    });
  }
  const absl::Time drain_deadline = absl::Now() + kRpcDeadline + absl::Seconds(1);
  while (hb_in_flight.load() > 0 && absl::Now() < drain_deadline)
    absl::SleepFor(absl::Milliseconds(5));
  const absl::Time end = absl::Now();
  res.heartbeats_per_second = (hb_ok + hb_failed) / absl::ToDoubleSeconds(end - hb_start);
  res.cpu_cores = (ProcessCpuSeconds() - cpu_start) / absl::ToDoubleSeconds(end - hb_start);
  if (hb_ok + hb_failed > 0)
    res.cpu_us_per_heartbeat = 1e6 * res.cpu_cores / res.heartbeats_per_second;

  res.heartbeats_ok = hb_ok;
  res.heartbeats_failed = hb_failed;
  res.heartbeats_late = hb_late;
  for (auto& a : agents) {
    if (a->silent) continue;
    double tail = absl::ToDoubleSeconds(std::min(end, stop) - a->last_renewed);
    res.max_gap_over_lease = std::max(
        res.max_gap_over_lease, std::max(a->max_gap_s, tail) / absl::ToDoubleSeconds(opts.lease));
  }
  {
    absl::MutexLock l(&mu);
    res.joined = joined;
    std::sort(latencies.begin(), latencies.end());
    res.latency_us_median = Percentile(latencies, 0.5);
    res.latency_us_p90 = Percentile(latencies, 0.9);
    res.latency_us_p99 = Percentile(latencies, 0.99);
    res.latency_us_max = latencies.empty() ? 0 : latencies.back();
  }
  res.members_at_end = (*server)->coordinator().members();
  res.evictions = static_cast<uint64_t>((*server)->metrics().evictions.Value());
  (*server)->Shutdown();
  for (auto& a : agents) delete a->ctx;
  if (hb_in_flight.load() > 0) return absl::DeadlineExceededError("heartbeats still in flight");
  return res;
}

}  // namespace gradex::bench
