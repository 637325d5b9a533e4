// Not absl::flags, on purpose: absl flag names are C++ identifiers, so it
// cannot accept the hyphenated names this command line has always had (the
// chart, scripts, docs and tests pass them), and its parser exits 1 and
// takes --json=yes, where this one exits 2 naming the flag and its range.
#include "services/coordinator/flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gradex::coordinator {

const char* Usage() {
  return R"(usage: gradex-coordinator --job-config FILE [options]

The gradex control plane for one job: membership, epochs and the plan.

  --job-config FILE      job configuration, JSON (gradex.v1.JobConfig; see
                         proto/gradex/v1/job_config.proto). Required.
  --listen HOST:PORT     gRPC address (default 127.0.0.1:50051; port 0 = any
                         free port). Without TLS only loopback addresses.
  --metrics-port PORT    serve Prometheus metrics on HOST:PORT/metrics
  --token-file FILE      the job's secret; every RPC must carry it as
                         'authorization: Bearer <token>'
  --tls-cert FILE        server certificate (PEM); with --tls-key enables TLS
  --tls-key FILE         server private key (PEM)
  --client-ca FILE       CA (PEM) that must sign client certificates (mutual TLS)
  --insecure-listen-any  allow a non-loopback --listen without TLS
  --help                 this text
  --version              print the version (release, git, CUDA, UCX) and exit
)";
}

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags f;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    auto take = [&](std::string* out) -> absl::Status {
      if (!has_value) {
        if (i + 1 >= args.size())
          return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
        value = args[++i];
      }
      if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
      *out = value;
      return absl::OkStatus();
    };
    absl::Status st;
    if (a == "--help" || a == "-h") {
      f.help = true;
    } else if (a == "--insecure-listen-any") {
      f.insecure_listen_any = true;
    } else if (a == "--listen") {
      st = take(&f.listen);
    } else if (a == "--job-config") {
      st = take(&f.job_config);
    } else if (a == "--tls-cert") {
      st = take(&f.tls_cert);
    } else if (a == "--tls-key") {
      st = take(&f.tls_key);
    } else if (a == "--client-ca") {
      st = take(&f.client_ca);
    } else if (a == "--token-file") {
      st = take(&f.token_file);
    } else if (a == "--metrics-port") {
      std::string v;
      st = take(&v);
      if (st.ok() &&
          (!absl::SimpleAtoi(v, &f.metrics_port) || f.metrics_port < 0 || f.metrics_port > 65535)) {
        st = absl::InvalidArgumentError(absl::StrCat("--metrics-port: '", v, "' is not a port"));
      }
    } else {
      st = absl::InvalidArgumentError(absl::StrCat("unknown argument '", args[i], "'"));
    }
    if (!st.ok()) return st;
  }
  if (!f.help && f.job_config.empty())
    return absl::InvalidArgumentError("--job-config is required");
  return f;
}

}  // namespace gradex::coordinator
