// gradex-agent's run: the coordinator's control plane, UCX (with the fault
// injections asked for), metrics, then the server role or the step loop on
// seeded synthetic gradients with the optional invariant checks.
#include "agent/agent_cli_run.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/faults/stall_entry_fault.h"
#include "agent/faults/tag_flood_fault.h"
#include "agent/step_invariants.h"
#include "member/grpc_control_plane.h"
#include "member/member_wiring.h"
#include "pipeline/agent.h"
#include "pipeline/whole_step.h"
#include "ps/server_role.h"

namespace gradex::agent {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(what, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

}  // namespace

int Run(const Flags& f) {
  absl::StatusOr<std::string> token = ReadFile(f.token_file, "--token-file");
  if (!token.ok()) {
    std::cerr << "gradex-agent: " << token.status().message() << "\n";
    return 2;
  }
  member::GrpcControlPlaneOptions g = f.grpc;
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
  member::MemberWiringOptions wiring{.control = g, .data_ip = f.data_ip};
  wiring.ucx.tls = f.ucx_tls;
  // No schedule sends more in one message than a bucket in dense frames
  // (FrameBytes picks the smaller encoding) plus a header per block, twice
  // over for slack; the link probe's 1 MiB message sets the floor. A server
  // caps each receive itself (DgsServer: its shard's largest message).
  const size_t most = std::max<size_t>(2 * (f.elements * 4 + 48 * 4096), (1u << 20) + (64u << 10));
  wiring.ucx.max_message_bytes = f.server ? 0 : most;
  member::WiringPart failed = member::WiringPart::kNone;
  absl::StatusOr<member::MemberWiring> wired = member::WireMember(std::move(wiring), &failed);
  if (!wired.ok()) {
    std::cerr << "gradex-agent: " << wired.status() << "\n";
    return failed == member::WiringPart::kUcx ? 1 : 2;
  }
  std::unique_ptr<member::ControlPlane> control = std::move(wired->control);
  std::unique_ptr<member::TransportProvider> transports = std::move(wired->transports);
  if (f.stall_entry > 0) {
    transports = faults::StallEntryFault(std::move(transports), f.stall_entry,
                                         std::chrono::milliseconds(f.stall_ms));
  }
  if (f.tag_flood_mib > 0) {
    transports = faults::TagFloodFault(std::move(transports), static_cast<size_t>(f.tag_flood_mib));
  }
  pipeline::AgentMetrics metrics;
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
  pipeline::AgentOptions o;
  o.job = f.job;
  o.token = std::string(absl::StripAsciiWhitespace(*token));
  // The node the agent joins with (the hierarchical exchange's): the flag,
  // else GRADEX_NODE, else the host name.
  const char* env_node = std::getenv("GRADEX_NODE");
  o.host = !f.node.empty()                         ? f.node
           : env_node != nullptr && *env_node != 0 ? std::string(env_node)
                                                   : std::string(host);
  o.rules.hierarchy = !f.hierarchy_off;
  o.local_rank = f.local_rank;
  o.agent_id =
      f.agent_id.empty() ? absl::StrCat(host, "/", f.local_rank, "/", getpid()) : f.agent_id;
  o.elements = f.elements;
  o.buckets = f.buckets;
  o.join_timeout = std::chrono::milliseconds(f.join_timeout_ms);
  if (f.server) {
    return ps::RunServerRole(o, g.rpc_timeout, f.snapshot_dir, f.quiet, control.get(),
                             transports.get(), &metrics);
  }
  pipeline::Agent agent(o, control.get(), transports.get(), &metrics);
  if (absl::Status s = agent.Start(); !s.ok()) {
    std::cerr << "gradex-agent: join " << f.grpc.target << ": " << s << "\n";
    return 1;
  }
  const uint64_t agent_seed = pipeline::JobId(o.agent_id);
  std::vector<std::vector<float>> grads(f.buckets, std::vector<float>(f.elements));
  std::vector<std::span<const float>> spans(grads.begin(), grads.end());
  std::unique_ptr<StepInvariants> invariants;
  if (f.check_invariants)
    invariants = std::make_unique<StepInvariants>(o.job, f.buckets, f.elements, f.corrupt_step);
  pipeline::WholeStep whole(&agent);
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
    pipeline::StepOutcome out;
    if (invariants != nullptr) invariants->Before(whole);
    absl::Status s = whole.Run(spans, &out);
    if (s.ok() && invariants != nullptr) {
      std::string violation;
      s = invariants->After(whole, spans, out, &violation);
      if (!violation.empty()) {
        std::cerr << "gradex-agent: INVARIANT VIOLATED: " << violation << "\n";
        return 3;
      }
      if (!s.ok()) {
        // The step's peers are gone or late: give the communicator up so the
        // next step re-joins, as after a failed step.
        if (transport::Transport* t = agent.transport())
          t->Abort(transport::DeadlineIn(std::chrono::milliseconds(1000)));
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
      for (const collectives::CallStats& c : out.stats) {
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

}  // namespace gradex::agent
