// The option table's data: every ClientOptions field's spec (Build), the
// validators its strings use, and the lookups by name, C key and Python keyword.
#include "services/client/option_table.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "member/bucket_choice.h"
#include "services/coordinator/validate.h"

namespace gradex::client {
namespace {

using T = OptionType;

// HOST:PORT with a non-empty host and a port in 1..65535 ([v6]:PORT too).
bool IsHostPort(absl::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 || colon + 1 == s.size()) return false;
  int port;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &port) || port < 1 || port > 65535) return false;
  for (char c : s.substr(0, colon)) {
    if (c == ' ' || c == '/' || c == '\t') return false;
  }
  return true;
}

// Empty: none given (the option's own default applies).
bool IsHost(absl::string_view s) {
  if (s.size() > 253) return false;
  for (char c : s) {
    if (c == ' ' || c == '/' || c == '\t' || c == '\n' || c == '@') return false;
  }
  return true;
}

bool IsHierarchy(absl::string_view s) { return s == "auto" || s == "off"; }
// A node identity travels in the join's host field (1..255 printable bytes).
bool IsNode(absl::string_view s) {
  if (s.size() > 255) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

bool IsCoordinator(absl::string_view s) { return s.empty() || IsHostPort(s); }
bool IsBindHost(absl::string_view s) { return IsHost(s) && s.find(':') == absl::string_view::npos; }
bool IsJob(absl::string_view s) { return coordinator::IsValidJobId(s); }
bool IsAlgorithm(absl::string_view s) {
  return s == "auto" || catalog::Find(std::string_view(s.data(), s.size())) != nullptr;
}

// Field access: one line per member.
#define GRADEX_FIELD(member, type)                                              \
  .get = [](const ClientOptions& o) -> OptionValue { return type(o.member); },  \
  .set = [](ClientOptions* o, OptionValue v) {                                  \
    o->member = static_cast<decltype(o->member)>(std::get<type>(std::move(v))); \
  }

constexpr double kMaxWorld = 65536;

std::vector<OptionSpec> Build() {
  std::vector<OptionSpec> t;
  t.push_back({.name = "job",
               .type = T::kString,
               .valid = IsJob,
               .expected = "1..128 bytes of [A-Za-z0-9._-]",
               .env = {{"GRADEX_JOB"}},
               .c_key = "job",
               .py_keyword = "job",
               .example = "train-1",
               .description = "the job id to join",
               GRADEX_FIELD(job, std::string)});
  t.push_back({.name = "rank",
               .type = T::kInt,
               .range = OptionRange{0, kMaxWorld - 1},
               .env = {{"RANK"}},
               .c_key = "rank",
               .py_keyword = "rank",
               .example = "3",
               .description = "the trainer's rank (below world_size); rank 0 embeds the "
                              "coordinator when none is given",
               GRADEX_FIELD(rank, int64_t)});
  t.push_back({.name = "world_size",
               .type = T::kInt,
               .range = OptionRange{1, kMaxWorld},
               .env = {{"WORLD_SIZE"}},
               .c_key = "world_size",
               .py_keyword = "world_size",
               .example = "4",
               .description = "the job's ranks (GradexState: torch.distributed's)",
               GRADEX_FIELD(world_size, int64_t)});
  t.push_back({.name = "local_rank",
               .type = T::kInt,
               .range = OptionRange{0, kMaxWorld - 1},
               .env = {{"LOCAL_RANK"}},
               .c_key = "local_rank",
               .py_keyword = "local_rank",
               .example = "1",
               .description = "the rank on this host (the metrics port's offset)",
               GRADEX_FIELD(local_rank, int64_t)});
  t.push_back({.name = "coordinator",
               .type = T::kString,
               .valid = IsCoordinator,
               .expected = "HOST:PORT",
               .env = {{"GRADEX_COORDINATOR"}},
               .c_key = "coordinator",
               .py_keyword = "coordinator",
               .example = "coord-0:50051",
               .description = "an existing coordinator to join; none: rank 0 starts one in its "
                              "process and publishes it through torch.distributed's store",
               GRADEX_FIELD(coordinator, std::string)});
  t.push_back({.name = "token",
               .type = T::kString,
               .env = {{"GRADEX_TOKEN_FILE", EnvKind::kTrimmedFile}, {"GRADEX_TOKEN"}},
               .c_key = "token",
               .py_keyword = "token",
               .example = "s3cret",
               .description = "the job's token (the file wins over the variable)",
               GRADEX_FIELD(token, std::string)});
  t.push_back({.name = "advertise_host",
               .type = T::kString,
               .valid = IsHost,
               .expected = "a host name or address",
               .env = {{"GRADEX_COORDINATOR_HOST"}, {"MASTER_ADDR"}},
               .c_key = "advertise_host",
               .py_keyword = "advertise_host",
               .example = "node-0",
               .description = "where the other ranks reach rank 0's embedded coordinator "
                              "(none: 127.0.0.1)",
               GRADEX_FIELD(advertise_host, std::string)});
  t.push_back({.name = "algorithm",
               .type = T::kString,
               .valid = IsAlgorithm,
               .expected = "auto or an algorithm of the catalog",
               .c_key = "algorithm",
               .py_keyword = "algorithm",
               .plan_decided = true,
               .job_field = "algorithm",
               .example = "spardl",
               .description = "a catalog name (`spardl`, `spardl-bsag`, `oktopk`, `topka`, "
                              "`covap`, `dense-ring`, ...) or `auto`: chosen per bucket from the "
                              "cost model and the measured link",
               GRADEX_FIELD(algorithm, std::string)});
  t.push_back({.name = "density",
               .type = T::kDouble,
               .range = OptionRange{0, 1, /*lo_open=*/true},
               .c_key = "density",
               .py_keyword = "density",
               .plan_decided = true,
               .job_field = "density",
               .example = "0.05",
               .description = "fraction of each bucket's entries a rank contributes per step, "
                              "k = ceil(d·n); the result holds about k entries under spardl "
                              "(a global top-k) and up to P·k under topka (the union), so "
                              "compare algorithms at equal bytes, not equal density",
               GRADEX_FIELD(density, double)});
  t.push_back({.name = "teams",
               .type = T::kInt,
               .range = OptionRange{0, kMaxWorld},
               .c_key = "teams",
               .py_keyword = "teams",
               .plan_decided = true,
               .job_field = "teams",
               .example = "2",
               .description = "SparDL's team count (at most world_size); 0: the coordinator's "
                              "(never a disagreement with the plan)",
               GRADEX_FIELD(teams, int64_t)});
  t.push_back({.name = "params",
               .type = T::kParams,
               .c_key = "param.",
               .py_keyword = "params",
               .plan_decided = true,
               .job_field = "params",
               .example = "oktopk_tau=32",
               .description = "algorithm parameters by catalog name (C: `param.NAME`; "
                              "GradexState: `**params`, e.g. `covap_interval=3`)",
               GRADEX_FIELD(params, catalog::ParamValues)});
  t.push_back({.name = "start_iter",
               .type = T::kUint,
               .range = OptionRange{0, static_cast<double>(member::kMaxRuleSteps)},
               .c_key = "start_iter",
               .py_keyword = "start_iter",
               .example = "10",
               .description = "steps [0, start_iter) run dense (rank 0's value wins; others warn); "
                              "not given: 384 under algorithm auto with dense probes on (the "
                              "warm-up in which each bucket's side is chosen), else 0",
               GRADEX_FIELD(start_iter, uint64_t)});
  t.push_back({.name = "min_compression_rate",
               .type = T::kDouble,
               .range = OptionRange{0, member::kMaxMinCompressionRate},
               .c_key = "min_compression_rate",
               .py_keyword = "min_compression_rate",
               .example = "1.5",
               .description = "a bucket of n elements stays dense when 4n / (8·ceil(d·n)) is "
                              "below this (rank 0's value wins; others warn)",
               GRADEX_FIELD(min_compression_rate, double)});
  t.push_back({.name = "dense_probe_period",
               .type = T::kUint,
               .range = OptionRange{0, static_cast<double>(member::kMaxRuleSteps)},
               .c_key = "dense_probe_period",
               .py_keyword = "dense_probe_period",
               .example = "7",
               .description = "every this many steps each sparse bucket's dense exchange is "
                              "timed (on zeros, beside its own: the training never sees it); 0: "
                              "never (rank 0's value wins; others warn)",
               GRADEX_FIELD(dense_probe_period, uint64_t)});
  t.push_back({.name = "max_bucket_elements",
               .type = T::kUint,
               .range = OptionRange{1, static_cast<double>(uint64_t{1} << 31)},
               .c_key = "max_bucket_elements",
               .py_keyword = "max_bucket_elements",
               .example = "1048576",
               .description = "the largest bucket; bounds what a peer may announce",
               GRADEX_FIELD(max_bucket_elements, uint64_t)});
  t.push_back(
      {.name = "timeout",
       .type = T::kDuration,
       .range = OptionRange{1, 86400000},
       .c_key = "timeout_ms",
       .py_keyword = "timeout_s",
       .example = "5000",
       .description = "deadline for joining and for every bucket's exchange (C: "
                      "milliseconds; Python: seconds); also the embedded coordinator's "
                      "step deadline",
       .get = [](const ClientOptions& o) -> OptionValue {
         return static_cast<int64_t>(o.timeout.count());
       },
       .set = [](ClientOptions* o,
                 OptionValue v) { o->timeout = std::chrono::milliseconds(std::get<int64_t>(v)); }});
  t.push_back({.name = "mean",
               .type = T::kBool,
               .c_key = "mean",
               .py_keyword = "mean",
               .example = "0",
               .description = "results are the mean over ranks (DDP); 0: the sum",
               GRADEX_FIELD(mean, bool)});
  t.push_back({.name = "metrics_port",
               .type = T::kInt,
               .range = OptionRange{-1, 65535},
               .env = {{"GRADEX_METRICS_PORT"}},
               .c_key = "metrics_port",
               .py_keyword = "metrics_port",
               .example = "9400",
               .description = "serve Prometheus metrics on this port + LOCAL_RANK; 0: any free "
                              "port; -1: none",
               GRADEX_FIELD(metrics_port, int64_t)});
  t.push_back({.name = "metrics_address",
               .type = T::kString,
               .valid = IsBindHost,
               .expected = "an IPv4 address or host name to bind",
               .env = {{"GRADEX_METRICS_ADDR"}},
               .example = "0.0.0.0",
               .description = "the address the metrics endpoint binds",
               GRADEX_FIELD(metrics_address, std::string)});
  t.push_back({.name = "tls_ca",
               .type = T::kString,
               .env = {{"GRADEX_TLS_CA_FILE", EnvKind::kFile}},
               .example = "-----BEGIN CERTIFICATE-----\nca\n",
               .description = "TLS to a coordinator given by address: the CA that signed its "
                              "certificate (PEM)",
               GRADEX_FIELD(tls_ca, std::string)});
  t.push_back({.name = "tls_client_cert",
               .type = T::kString,
               .env = {{"GRADEX_TLS_CERT_FILE", EnvKind::kFile}},
               .example = "-----BEGIN CERTIFICATE-----\ncert\n",
               .description = "mutual TLS: this client's certificate (PEM)",
               GRADEX_FIELD(tls_client_cert, std::string)});
  t.push_back({.name = "tls_client_key",
               .type = T::kString,
               .env = {{"GRADEX_TLS_KEY_FILE", EnvKind::kFile}},
               .example = "-----BEGIN PRIVATE KEY-----\nkey\n",
               .description = "mutual TLS: this client's key (PEM)",
               GRADEX_FIELD(tls_client_key, std::string)});
  t.push_back({.name = "tls_server_name",
               .type = T::kString,
               .valid = IsHost,
               .expected = "a host name",
               .env = {{"GRADEX_TLS_SERVER_NAME"}},
               .example = "coord.example",
               .description = "the name the coordinator's certificate holds, when not its address",
               GRADEX_FIELD(tls_server_name, std::string)});
  t.push_back({.name = "data_ip",
               .type = T::kString,
               .env = {{"GRADEX_DATA_IP"}},
               .c_key = "data_ip",
               .py_keyword = "data_ip",
               .example = "10.0.0.7",
               .description = "the address of the interface the data plane (UCX) uses",
               GRADEX_FIELD(data_ip, std::string)});
  t.push_back({.name = "timeline_path",
               .type = T::kString,
               .env = {{"GRADEX_TIMELINE"}},
               .c_key = "timeline",
               .py_keyword = "timeline_path",
               .example = "/tmp/gradex-timeline.json",
               .description = "write a Chrome trace of every step's phases here",
               GRADEX_FIELD(timeline_path, std::string)});
  t.push_back({.name = "refuse_nonfinite",
               .type = T::kBool,
               .c_key = "refuse_nonfinite",
               .py_keyword = "refuse_nonfinite",
               .example = "0",
               .description = "NaN/Inf are exchanged as 0 and that rank's bucket fails naming "
                              "them (a peer that sends any is evicted); 0: summed as DDP would; "
                              "rank 0's value holds for every rank",
               GRADEX_FIELD(refuse_nonfinite, bool)});
  t.push_back({.name = "hierarchy",
               .type = T::kString,
               .valid = IsHierarchy,
               .expected = "auto or off",
               .env = {{"GRADEX_HIERARCHY"}},
               .c_key = "hierarchy",
               .py_keyword = "hierarchy",
               .example = "off",
               .description = "auto: dense inside a node, sparse across nodes when there are "
                              "several nodes of as many ranks each; off: every rank exchanges "
                              "sparsely with every other (flat); rank 0's value holds for every "
                              "rank",
               GRADEX_FIELD(hierarchy, std::string)});
  t.push_back({.name = "node",
               .type = T::kString,
               .valid = IsNode,
               .expected = "0..255 printable bytes without spaces",
               .env = {{"GRADEX_NODE"}},
               .c_key = "node",
               .py_keyword = "node",
               .example = "gpu-node-7",
               .description = "the machine this rank runs on: ranks with the same node share its "
                              "intra-node fabric (empty: the host name)",
               GRADEX_FIELD(node, std::string)});
  t.push_back({.name = "pipeline",
               .type = T::kBool,
               .env = {{"GRADEX_PIPELINE"}},
               .c_key = "pipeline",
               .py_keyword = "pipeline",
               .example = "0",
               .description = "overlap bucket b+1's selection with bucket b's exchange",
               GRADEX_FIELD(pipeline, bool)});
  t.push_back({.name = "momentum_correction",
               .type = T::kDouble,
               .range = OptionRange{0, 1, false, /*hi_open=*/true},
               .c_key = "momentum_correction",
               .py_keyword = "momentum_correction",
               .example = "0.9",
               .description = "DGC's momentum correction: the optimizer's momentum, moved here "
                              "(build the optimizer with momentum=0); 0: off",
               GRADEX_FIELD(momentum_correction, double)});
  t.push_back({.name = "factor_masking",
               .type = T::kBool,
               .c_key = "factor_masking",
               .py_keyword = "factor_masking",
               .example = "0",
               .description = "with momentum_correction, DGC's factor masking of the velocity",
               GRADEX_FIELD(factor_masking, bool)});
  t.push_back({.name = "allow_plan_override",
               .type = T::kBool,
               .env = {{"GRADEX_ALLOW_PLAN_OVERRIDE"}},
               .c_key = "allow_plan_override",
               .py_keyword = "allow_plan_override",
               .example = "1",
               .description = "a plan-decided option asked for with another value than the "
                              "plan's: warn (once per option) and run the plan's, instead of "
                              "failing",
               GRADEX_FIELD(allow_plan_override, bool)});
  return t;
}

#undef GRADEX_FIELD

}  // namespace

const std::vector<OptionSpec>& OptionTable() {
  static const std::vector<OptionSpec>* table = new std::vector<OptionSpec>(Build());
  return *table;
}

const OptionSpec* FindOption(absl::string_view name) {
  for (const OptionSpec& s : OptionTable()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const OptionSpec* FindCKey(absl::string_view key) {
  for (const OptionSpec& s : OptionTable()) {
    if (s.c_key.empty()) continue;
    if (s.type == T::kParams ? absl::StartsWith(key, s.c_key) && key.size() > s.c_key.size()
                             : key == s.c_key) {
      return &s;
    }
  }
  return nullptr;
}

const OptionSpec* FindPyKeyword(absl::string_view keyword) {
  for (const OptionSpec& s : OptionTable()) {
    if (!s.py_keyword.empty() && s.py_keyword == keyword) return &s;
  }
  return nullptr;
}

}  // namespace gradex::client
