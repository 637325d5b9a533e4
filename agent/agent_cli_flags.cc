// gradex-agent's flags: the usage text and the parser with its range checks.
#include "agent/agent_cli_flags.h"

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gradex::agent {

const char kUsage[] =
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
  --node NODE              the machine this agent runs on: agents with the same node share its
                           fabric (default: GRADEX_NODE, else the host name)
  --hierarchy auto|off     auto (default): dense inside a node, sparse across nodes when the
                           epoch has several nodes of as many agents each; off: flat. The
                           lowest rank's holds for every rank
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
    else if (a == "--node")
      f->node = v;
    else if (a == "--hierarchy") {
      if (v != "auto" && v != "off") {
        return absl::InvalidArgumentError(
            absl::StrCat("--hierarchy: '", v, "' is not auto or off"));
      }
      f->hierarchy_off = v == "off";
    } else if (a == "--ucx-tls")
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

}  // namespace gradex::agent
