// ApplyEnvironment (client.h): what torchrun and a Kubernetes job put in the
// environment, by the option table's variables (option_table.h). Unset or
// empty variables leave the option as it is.
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "services/client/client.h"
#include "services/client/option_table.h"

namespace gradex::client {
namespace {

const char* Get(absl::string_view name) {
  const char* v = std::getenv(std::string(name).c_str());
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// The contents of the file a variable names; INVALID_ARGUMENT naming it
// when unreadable or empty. Files over 1 MiB are refused (a PEM bundle or a
// token is far smaller).
absl::StatusOr<std::string> ReadNamedFile(absl::string_view name, const char* path, bool trim) {
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
  if (trim) return std::string(absl::StripAsciiWhitespace(data));
  return data;
}

}  // namespace

absl::StatusOr<std::optional<OptionValue>> OptionFromEnvironment(const OptionSpec& spec,
                                                                 absl::string_view* source) {
  for (const OptionEnv& env : spec.env) {
    const char* v = Get(env.name);
    if (v == nullptr) continue;
    std::string text = v;
    if (env.kind != EnvKind::kValue) {
      absl::StatusOr<std::string> data =
          ReadNamedFile(env.name, v, env.kind == EnvKind::kTrimmedFile);
      if (!data.ok()) return data.status();
      text = *std::move(data);
    }
    absl::StatusOr<OptionValue> value = ParseOptionText(spec, text);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(env.name, "='", std::string(v).substr(0, 64),
                                                     "' (option ", spec.name, "): expected ",
                                                     value.status().message()));
    }
    *source = env.name;
    return std::optional<OptionValue>(*std::move(value));  // the first variable set wins
  }
  return std::optional<OptionValue>();
}

absl::Status ApplyEnvironment(ClientOptions* o) {
  for (const OptionSpec& spec : OptionTable()) {
    absl::string_view source;
    absl::StatusOr<std::optional<OptionValue>> value = OptionFromEnvironment(spec, &source);
    if (!value.ok()) return value.status();
    if (!value->has_value()) continue;
    if (absl::Status s = SetOption(o, spec, **std::move(value), source); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(s.message(), " (option ", spec.name, ")"));
    }
  }
  if (o->rank >= o->world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RANK=", o->rank, " is not below WORLD_SIZE=", o->world_size));
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
