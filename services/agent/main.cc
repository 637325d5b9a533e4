// gradex-agent: the agent runtime driven by synthetic seeded gradients, for
// cluster validation and benchmarks (like nccl-tests). Algorithm, density and
// teams come from the coordinator's plan.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "services/agent/agent.h"
#include "services/agent/data_interface.h"
#include "services/agent/grpc_control_plane.h"
#include "services/agent/server_role.h"
#include "services/agent/stall_entry_fault.h"
#include "services/agent/step_invariants.h"
#include "services/agent/tag_flood_fault.h"
#include "version/version.h"

namespace gradex::agent {
namespace {

constexpr char kUsage[] =
    R"(usage: gradex-agent --coordinator HOST:PORT --job J --token-file F --elements N --steps S [options]
  --coordinator HOST:PORT  the coordinator's gRPC address
  --job J                  job id (must match the coordinator's)
  --token-file F           file holding the job's secret
  --elements N             gradient elements per bucket
  --steps S                run until step S-1 has completed (steps count from 0 for the job)
  --buckets B              buckets per step (default 1)
  --metrics-port M         serve Prometheus metrics on 127.0.0.1:M/metrics (0.0.0.0 with --metrics-any)
  --metrics-any            bind the metrics port on all interfaces
  --seed S                 gradient seed (default 1)
  --agent-id ID            stable identity (default HOST/LOCAL_RANK/PID)
  --local-rank R           rank among the agents on this host (default 0)
  --ucx-tls T              UCX transports, e.g. tcp, posix (default: UCX_TLS or all)
  --data-ip IP             the interface the data plane listens on (default: GRADEX_DATA_IP,
                           else the local address of the route to the coordinator)
  --tls-ca F               CA of the coordinator's certificate (enables TLS)
  --tls-cert F --tls-key F client certificate and key (mutual TLS)
  --tls-server-name NAME   name the coordinator's certificate must carry when it is not the
                           host of --coordinator (e.g. dialling an IP address)
  --join-timeout-ms T      how long to wait for an epoch that includes this agent (default 120000)
  --join-timeout-s T       how long the first join retries a coordinator that is not (yet)
                           reachable, e.g. started after this agent (default 120); a refusal
                           (wrong token, bad request) fails at once
  --report-linger-ms T     after a step report, wait up to T ms for more before sending them
                           as one batch (default 100; 0..10000)
  --check-invariants       after every step check in-band (over the epoch's transport) that
                           the result is identical on every rank, conserves the gradient
                           mass (dense-ring over grad + residual_in - residual_out) and fits
                           its capacity; a violation exits with status 3
  --test-corrupt-step S    (testing) alter this rank's result of step S before the invariant
                           checks, to show they catch it
  --debug-stall-at-step S  (fault injection) before step S, stay out of the exchange for
  --debug-stall-ms M       M ms (default 0) while heartbeats go on, as a trainer stuck in
                           compute: the peers wait in step S, their steps time out, and the
                           coordinator's log names this rank as the cause of the stall
  --role worker|server     server: hold a dgs job's shards until SIGINT/SIGTERM (no --elements)
  --snapshot-dir D         server: snapshot (every ps.snapshot_interval_ms) and restore shards
  --debug-stall-entry K    (fault injection) in this agent's K-th epoch entry, stay out of the
                           UCX wire-up (never connect, never send the wire-up byte) for
                           --debug-stall-ms ms or until a newer epoch supersedes it, while
                           heartbeats go on: the peers' entry waits name this rank
  --debug-tag-flood MIB     (fault injection) with every message also send 64 KiB messages
                           on tags no schedule receives, up to MIB MiB to each peer per
                           epoch: the peers blame this rank and fail the step naming it
  --quiet                  no progress line per step
  --help                   this text
  --version                print the version and exit
)";

struct Flags {
  GrpcControlPlaneOptions grpc;
  std::string job, token_file, agent_id, ucx_tls, data_ip, tls_ca, tls_cert, tls_key;
  std::string snapshot_dir;  // --role server (`server`)
  size_t elements = 0;
  uint64_t steps = 0, seed = 1;
  int buckets = 1, metrics_port = -1, local_rank = 0;
  bool metrics_any = false, quiet = false, check_invariants = false, server = false;
  int64_t join_timeout_ms = 120000;
  int64_t join_timeout_s = 120;
  int64_t report_linger_ms = 100;
  uint64_t corrupt_step = ~uint64_t{0};
  uint64_t stall_step = ~uint64_t{0};
  int64_t stall_ms = 0;
  int stall_entry = 0;
  int64_t tag_flood_mib = 0;
};

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Not absl::flags: it cannot take hyphenated names (see bench/flags.cc).
absl::Status Parse(int argc, char** argv, Flags* f) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], v;
    if (a == "--help" || a == "-h") return absl::CancelledError("help");
    if (a == "--metrics-any") {
      f->metrics_any = true;
      continue;
    }
    if (a == "--quiet") {
      f->quiet = true;
      continue;
    }
    if (a == "--check-invariants") {
      f->check_invariants = true;
      continue;
    }
    if (size_t eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < args.size()) {
      v = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(a, " needs a value (see --help)"));
    }
    auto number = [&](auto* out) -> absl::Status {
      if (!absl::SimpleAtoi(v, out)) {
        return absl::InvalidArgumentError(absl::StrCat(a, ": '", v, "' is not a number"));
      }
      return absl::OkStatus();
    };
    absl::Status s;
    if (a == "--coordinator")
      f->grpc.target = v;
    else if (a == "--job")
      f->job = v;
    else if (a == "--token-file")
      f->token_file = v;
    else if (a == "--agent-id")
      f->agent_id = v;
    else if (a == "--ucx-tls")
      f->ucx_tls = v;
    else if (a == "--data-ip")
      f->data_ip = v;
    else if (a == "--tls-ca")
      f->tls_ca = v;
    else if (a == "--tls-cert")
      f->tls_cert = v;
    else if (a == "--tls-key")
      f->tls_key = v;
    else if (a == "--tls-server-name")
      f->grpc.tls_server_name = v;
    else if (a == "--elements")
      s = number(&f->elements);
    else if (a == "--steps")
      s = number(&f->steps);
    else if (a == "--seed")
      s = number(&f->seed);
    else if (a == "--buckets")
      s = number(&f->buckets);
    else if (a == "--metrics-port")
      s = number(&f->metrics_port);
    else if (a == "--local-rank")
      s = number(&f->local_rank);
    else if (a == "--test-corrupt-step")
      s = number(&f->corrupt_step);
    else if (a == "--debug-stall-at-step")
      s = number(&f->stall_step);
    else if (a == "--debug-stall-ms")
      s = number(&f->stall_ms);
    else if (a == "--debug-stall-entry")
      s = number(&f->stall_entry);
    else if (a == "--debug-tag-flood")
      s = number(&f->tag_flood_mib);
    else if (a == "--join-timeout-ms")
      s = number(&f->join_timeout_ms);
    else if (a == "--join-timeout-s")
      s = number(&f->join_timeout_s);
    else if (a == "--report-linger-ms")
      s = number(&f->report_linger_ms);
    else if (a == "--snapshot-dir")
      f->snapshot_dir = v;
    else if (a == "--role" && (v == "worker" || v == "server"))
      f->server = v == "server";
    else if (a == "--role")
      return absl::InvalidArgumentError("--role must be worker or server");
    else
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a, " (see --help)"));
    if (!s.ok()) return s;
  }
  if (f->grpc.target.empty()) return absl::InvalidArgumentError("--coordinator is required");
  if (f->job.empty()) return absl::InvalidArgumentError("--job is required");
  if (f->token_file.empty()) return absl::InvalidArgumentError("--token-file is required");
  if (f->elements == 0 && !f->server) return absl::InvalidArgumentError("--elements must be > 0");
  if (f->steps == 0 && !f->server) return absl::InvalidArgumentError("--steps must be > 0");
  if (!f->snapshot_dir.empty() && !f->server)
    return absl::InvalidArgumentError("--snapshot-dir: --role server only");
  if (f->buckets < 1 || f->buckets > 4096) {
    return absl::InvalidArgumentError("--buckets must be in 1..4096");
  }
  if (f->stall_ms < 0 || f->stall_ms > 3600 * 1000) {
    return absl::InvalidArgumentError("--debug-stall-ms must be in 0..3600000");
  }
  if (f->stall_entry < 0 || f->stall_entry > 1000000) {
    return absl::InvalidArgumentError("--debug-stall-entry must be in 0..1000000");
  }
  if (f->tag_flood_mib < 0 || f->tag_flood_mib > 65536) {
    return absl::InvalidArgumentError("--debug-tag-flood must be in 0..65536 (MiB)");
  }
  if (f->metrics_port > 65535) return absl::InvalidArgumentError("--metrics-port out of range");
  if (f->join_timeout_s < 0 || f->join_timeout_s > 86400) {
    return absl::InvalidArgumentError("--join-timeout-s must be in 0..86400");
  }
  if (f->report_linger_ms < 0 || f->report_linger_ms > 10000) {
    return absl::InvalidArgumentError("--report-linger-ms must be in 0..10000");
  }
  if (f->tls_cert.empty() != f->tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!f->grpc.tls_server_name.empty() && f->tls_ca.empty()) {
    return absl::InvalidArgumentError("--tls-server-name needs --tls-ca");
  }
  return absl::OkStatus();
}

// Seeded synthetic gradient: a function of (seed, agent, step, bucket) only,
// normal-like values (sum of 4 uniforms), 5% exact zeros.
void Synthesize(uint64_t seed, uint64_t agent, uint64_t step, int bucket, std::vector<float>& g) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ agent * 0xBF58476D1CE4E5B9ull ^
               step * 0x94D049BB133111EBull ^ static_cast<uint64_t>(bucket + 1);
  auto next = [&x] {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (float& v : g) {
    const uint64_t r = next();
    if (r % 20 == 0) {
      v = 0;
      continue;
    }
    double s = 0;
    for (int k = 0; k < 4; ++k) s += static_cast<double>((r >> (16 * k)) & 0xffff) / 65536.0;
    v = static_cast<float>((s - 2.0) * 1e-2);
  }
}

int Run(const Flags& f) {
  absl::StatusOr<std::string> token = ReadFile(f.token_file, "--token-file");
  if (!token.ok()) {
    std::cerr << "gradex-agent: " << token.status().message() << "\n";
    return 2;
  }
  GrpcControlPlaneOptions g = f.grpc;
  g.join_timeout = std::chrono::seconds(f.join_timeout_s);
  g.report_linger = std::chrono::milliseconds(f.report_linger_ms);
  g.on_join_progress = [](const std::string& line) {
    std::cerr << "gradex-agent: " << line << std::endl;
  };
  for (auto [path, out] :
       {std::pair{&f.tls_ca, &g.tls_ca}, std::pair{&f.tls_cert, &g.tls_client_cert},
        std::pair{&f.tls_key, &g.tls_client_key}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> pem = ReadFile(*path, "TLS file");
    if (!pem.ok()) {
      std::cerr << "gradex-agent: " << pem.status().message() << "\n";
      return 2;
    }
    *out = *pem;
  }
  absl::StatusOr<std::unique_ptr<ControlPlane>> control = CreateGrpcControlPlane(g);
  if (!control.ok()) {
    std::cerr << "gradex-agent: " << control.status() << "\n";
    return 2;
  }
  UcxOptions ucx;
  ucx.tls = f.ucx_tls;
  absl::StatusOr<std::string> data_ip = DataPlaneIp(f.data_ip, f.grpc.target);
  if (!data_ip.ok()) {
    std::cerr << "gradex-agent: " << data_ip.status().message() << "\n";
    return 2;
  }
  ucx.listen_ip = *data_ip;
  // No schedule sends more in one message than a bucket in dense frames
  // (FrameBytes picks the smaller encoding) plus a header per block, twice
  // over for slack; the link probe's 1 MiB message sets the floor. A server
  // caps each receive itself (DgsServer: its shard's largest message).
  const size_t most = std::max<size_t>(2 * (f.elements * 4 + 48 * 4096), (1u << 20) + (64u << 10));
  ucx.max_message_bytes = f.server ? 0 : most;
  absl::StatusOr<std::unique_ptr<TransportProvider>> transports = CreateUcxProvider(ucx);
  if (!transports.ok()) {
    std::cerr << "gradex-agent: UCX: " << transports.status() << "\n";
    return 1;
  }
  if (f.stall_entry > 0) {
    *transports = StallEntryFault(*std::move(transports), f.stall_entry,
                                  std::chrono::milliseconds(f.stall_ms));
  }
  if (f.tag_flood_mib > 0) {
    *transports = TagFloodFault(*std::move(transports), static_cast<size_t>(f.tag_flood_mib));
  }
  AgentMetrics metrics;
  if (f.metrics_port >= 0) {
    const std::string bind =
        absl::StrCat(f.metrics_any ? "0.0.0.0" : "127.0.0.1", ":", f.metrics_port);
    if (absl::Status s = metrics.Serve(bind); !s.ok()) {
      std::cerr << "gradex-agent: " << s.message() << "\n";
      return 2;
    }
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  AgentOptions o;
  o.job = f.job;
  o.token = std::string(absl::StripAsciiWhitespace(*token));
  o.host = host;
  o.local_rank = f.local_rank;
  o.agent_id =
      f.agent_id.empty() ? absl::StrCat(host, "/", f.local_rank, "/", getpid()) : f.agent_id;
  o.elements = f.elements;
  o.buckets = f.buckets;
  o.join_timeout = std::chrono::milliseconds(f.join_timeout_ms);
  if (f.server) {
    return RunServerRole(o, g.rpc_timeout, f.snapshot_dir, f.quiet, control->get(),
                         transports->get(), &metrics);
  }
  Agent agent(o, control->get(), transports->get(), &metrics);
  if (absl::Status s = agent.Start(); !s.ok()) {
    std::cerr << "gradex-agent: join " << f.grpc.target << ": " << s << "\n";
    return 1;
  }
  const uint64_t agent_seed = JobId(o.agent_id);
  std::vector<std::vector<float>> grads(f.buckets, std::vector<float>(f.elements));
  std::vector<std::span<const float>> spans(grads.begin(), grads.end());
  std::unique_ptr<StepInvariants> invariants;
  if (f.check_invariants)
    invariants = std::make_unique<StepInvariants>(o.job, f.buckets, f.elements, f.corrupt_step);
  int failures_in_a_row = 0;
  bool stalled = false;
  while (!(agent.connected() && agent.next_step() >= f.steps)) {
    const uint64_t step = agent.next_step();
    if (step == f.stall_step && f.stall_ms > 0 && !stalled) {
      std::cerr << "gradex-agent: --debug-stall-ms: staying out of step " << step << " for "
                << f.stall_ms << " ms\n";
      std::this_thread::sleep_for(std::chrono::milliseconds(f.stall_ms));
      stalled = true;  // once, not again if the step fails and is re-run
    }
    for (int b = 0; b < f.buckets; ++b) Synthesize(f.seed, agent_seed, step, b, grads[b]);
    StepOutcome out;
    if (invariants != nullptr) invariants->Before(agent);
    absl::Status s = agent.Step(spans, &out);
    if (s.ok() && invariants != nullptr) {
      std::string violation;
      s = invariants->After(agent, spans, out, &violation);
      if (!violation.empty()) {
        std::cerr << "gradex-agent: INVARIANT VIOLATED: " << violation << "\n";
        return 3;
      }
      if (!s.ok()) {
        // The step's peers are gone or late: give the communicator up so the
        // next step re-joins, as after a failed step.
        if (Transport* t = agent.transport()) t->Abort(DeadlineIn(std::chrono::milliseconds(1000)));
        s = absl::Status(s.code(), absl::StrCat("step ", out.step, " epoch ", out.epoch,
                                                " invariant check: ", s.message()));
      }
    }
    if (!s.ok()) {
      std::cerr << "gradex-agent: " << s << "\n";
      if (++failures_in_a_row >= 5 || s.code() == absl::StatusCode::kUnauthenticated) {
        std::cerr << "gradex-agent: giving up after " << failures_in_a_row << " failures\n";
        return 1;
      }
      continue;
    }
    failures_in_a_row = 0;
    if (!f.quiet) {
      size_t nnz = 0;
      uint64_t sent = 0;
      for (const CallStats& c : out.stats) {
        nnz += c.result_nnz;
        sent += c.sent_bytes;
      }
      std::printf("step %llu epoch %u rank %d/%d %s density %g nnz %zu sent %llu B %.2f ms%s\n",
                  static_cast<unsigned long long>(out.step), out.epoch, out.rank, out.world,
                  out.algorithm.c_str(), out.density, nnz, static_cast<unsigned long long>(sent),
                  out.seconds * 1e3, invariants != nullptr ? " invariants ok" : "");
      std::fflush(stdout);
    }
  }
  if (absl::Status s = agent.Leave(); !s.ok()) std::cerr << "gradex-agent: leave: " << s << "\n";
  return 0;
}

}  // namespace
}  // namespace gradex::agent

int main(int argc, char** argv) {
  if (gradex::PrintVersionIfAsked(argc, argv, "gradex-agent")) return 0;
  gradex::agent::Flags f;
  absl::Status s = gradex::agent::Parse(argc, argv, &f);
  if (absl::IsCancelled(s)) {
    std::fputs(gradex::agent::kUsage, stdout);
    return 0;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "gradex-agent: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return gradex::agent::Run(f);
}
