// ApplyEnvironment (client.h): what torchrun and a Kubernetes job put in the
// environment. Unset or empty variables leave the option as it is.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "services/client/client.h"
#include "services/coordinator/validate.h"

namespace gradex::client {
namespace {

const char* Get(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

absl::Status Malformed(const char* name, const std::string& value, const char* want) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", value.substr(0, 64), "': expected ", want));
}

absl::Status Int(const char* name, int lo, int hi, int* out) {
  const char* v = Get(name);
  if (v == nullptr) return absl::OkStatus();
  int x;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return Malformed(name, v, absl::StrCat("an integer in ", lo, "..", hi).c_str());
  }
  *out = x;
  return absl::OkStatus();
}

// HOST:PORT with a non-empty host and a port in 1..65535 ([v6]:PORT too).
bool IsHostPort(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return false;
  int port;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &port) || port < 1 || port > 65535) return false;
  for (char c : s.substr(0, colon)) {
    if (c == ' ' || c == '/' || c == '\t') return false;
  }
  return true;
}

bool IsHost(const std::string& s) {
  if (s.size() > 253) return false;
  for (char c : s) {
    if (c == ' ' || c == '/' || c == '\t' || c == '\n' || c == '@') return false;
  }
  return true;
}

// The contents of the file a variable names; INVALID_ARGUMENT naming it
// when unreadable or empty. Files over 1 MiB are refused (a PEM bundle or a
// token is far smaller).
absl::Status ReadNamedFile(const char* name, std::string* out) {
  const char* path = Get(name);
  if (path == nullptr) return absl::OkStatus();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", path, "': cannot read the file"));
  }
  std::string data(size_t{1} << 20, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (in.gcount() > 0 && !in.eof()) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", path, "' is over 1 MiB"));
  }
  if (absl::StripAsciiWhitespace(data).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", path, "' is empty"));
  }
  *out = std::move(data);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyEnvironment(ClientOptions* o) {
  constexpr int kMaxWorld = 65536;
  if (absl::Status s = Int("WORLD_SIZE", 1, kMaxWorld, &o->world_size); !s.ok()) return s;
  if (absl::Status s = Int("RANK", 0, kMaxWorld - 1, &o->rank); !s.ok()) return s;
  if (absl::Status s = Int("LOCAL_RANK", 0, kMaxWorld - 1, &o->local_rank); !s.ok()) return s;
  if (o->rank >= o->world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", o->rank, " is not below WORLD_SIZE=", o->world_size));
  }
  if (const char* v = Get("GRADEX_COORDINATOR")) {
    if (!IsHostPort(v)) return Malformed("GRADEX_COORDINATOR", v, "HOST:PORT");
    o->coordinator = v;
  }
  if (const char* v = Get("GRADEX_JOB")) {
    // The coordinator's rule for job ids, refused here with the variable's
    // name rather than as a failed join.
    if (!coordinator::IsValidJobId(v)) {
      return Malformed("GRADEX_JOB", v, "1..128 bytes of [A-Za-z0-9._-]");
    }
    o->job = v;
  }
  if (const char* v = Get("GRADEX_TOKEN")) o->token = v;
  if (const char* path = Get("GRADEX_TOKEN_FILE")) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("GRADEX_TOKEN_FILE='", path, "': cannot read the file"));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    std::string token(absl::StripAsciiWhitespace(ss.str()));
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("GRADEX_TOKEN_FILE='", path, "' is empty"));
    }
    o->token = std::move(token);
  }
  // The embedded coordinator's address for the other ranks: an explicit host,
  // else torchrun's MASTER_ADDR (the host of rank 0).
  for (const char* name : {"GRADEX_COORDINATOR_HOST", "MASTER_ADDR"}) {
    const char* v = Get(name);
    if (v == nullptr) continue;
    if (!IsHost(v)) return Malformed(name, v, "a host name or address");
    o->advertise_host = v;
    break;
  }
  if (absl::Status s = Int("GRADEX_METRICS_PORT", -1, 65535, &o->metrics_port); !s.ok()) return s;
  if (const char* v = Get("GRADEX_METRICS_ADDR")) {
    if (!IsHost(v) || std::string(v).find(':') != std::string::npos) {
      return Malformed("GRADEX_METRICS_ADDR", v, "an IPv4 address or host name to bind");
    }
    o->metrics_address = v;
  }
  if (absl::Status s = ReadNamedFile("GRADEX_TLS_CA_FILE", &o->tls_ca); !s.ok()) return s;
  if (absl::Status s = ReadNamedFile("GRADEX_TLS_CERT_FILE", &o->tls_client_cert); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadNamedFile("GRADEX_TLS_KEY_FILE", &o->tls_client_key); !s.ok()) return s;
  if (const char* v = Get("GRADEX_TLS_SERVER_NAME")) {
    if (!IsHost(v)) return Malformed("GRADEX_TLS_SERVER_NAME", v, "a host name");
    o->tls_server_name = v;
  }
  if (const char* v = Get("GRADEX_DATA_IP")) o->data_ip = v;
  if (const char* v = Get("GRADEX_TIMELINE")) o->timeline_path = v;
  if (const char* v = Get("GRADEX_PIPELINE")) {
    const std::string p = v;
    if (p != "0" && p != "1") return Malformed("GRADEX_PIPELINE", v, "0 or 1");
    o->pipeline = p == "1";
  }
  return absl::OkStatus();
}

int MetricsPortOf(const ClientOptions& o) {
  return o.metrics_port <= 0 ? o.metrics_port : o.metrics_port + o.local_rank;
}

absl::Status CheckMetricsPort(const ClientOptions& o) {
  if (o.metrics_port < -1 || o.metrics_port > 65535) {
    return absl::InvalidArgumentError("metrics_port (GRADEX_METRICS_PORT) must be -1..65535");
  }
  if (o.metrics_port > 0 && (o.local_rank < 0 || o.metrics_port + o.local_rank > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics port ", o.metrics_port, " + local rank ", o.local_rank,
        " (GRADEX_METRICS_PORT + LOCAL_RANK) is not a port: lower GRADEX_METRICS_PORT"));
  }
  return absl::OkStatus();
}

}  // namespace gradex::client
