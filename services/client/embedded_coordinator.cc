#include "services/client/embedded_coordinator.h"

#include <cstdio>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "services/coordinator/job_config.h"

namespace gradex::client {
namespace {

std::string FreshToken() {
  std::random_device rd;  // getrandom(2) on Linux
  std::string t;
  for (int i = 0; i < 8; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
    t += buf;
  }
  return t;  // 256 bits
}

bool IsName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

std::string HostPort(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return v6 ? absl::StrCat("[", host, "]:", port) : absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::string> EmbeddedJobConfig(const ClientOptions& o) {
  if (!IsName(o.job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", o.job.substr(0, 64), "': 1..128 characters of [A-Za-z0-9._-]"));
  }
  // "auto" goes through: the coordinator's bucket controller chooses per bucket.
  const std::string& algorithm = o.algorithm;
  if (!IsName(algorithm)) {
    return absl::InvalidArgumentError(absl::StrCat("algorithm '", algorithm.substr(0, 64),
                                                   "' unknown; known: ", catalog::NameList()));
  }
  std::string params;
  for (const auto& [name, value] : o.params) {
    if (!IsName(name)) {
      return absl::InvalidArgumentError(absl::StrCat("parameter name '", name.substr(0, 64), "'"));
    }
    char v[64];
    std::snprintf(v, sizeof(v), "%.17g", value);
    absl::StrAppend(&params, params.empty() ? "" : ", ", "\"", name, "\": ", v);
  }
  char density[64];
  std::snprintf(density, sizeof(density), "%.17g", o.density);
  return absl::StrCat("{\"job_id\": \"", o.job, "\", \"world_size\": ", o.world_size,
                      ", \"algorithm\": \"", algorithm, "\", \"density\": ", density,
                      ", \"teams\": ", o.teams, ", \"step_deadline_ms\": ", o.timeout.count(),
                      ", \"rendezvous_timeout_ms\": ", o.timeout.count(), ", \"params\": {", params,
                      "}}");
}

absl::StatusOr<CoordinatorEndpoint> FindCoordinator(const ClientOptions& o,
                                                    const Rendezvous& rendezvous,
                                                    const std::string& job_json) {
  CoordinatorEndpoint e;
  if (!o.coordinator.empty()) {
    e.address = o.coordinator;
    e.token = o.token;
    return e;
  }
  if (o.rank != 0) {
    if (!rendezvous.get) {
      return absl::InvalidArgumentError(
          "no coordinator (GRADEX_COORDINATOR) and no rendezvous to find rank 0's");
    }
    absl::StatusOr<std::string> address = rendezvous.get(kCoordinatorKey);
    if (!address.ok()) {
      return absl::Status(
          address.status().code(),
          absl::StrCat("rendezvous get '", kCoordinatorKey,
                       "' (rank 0's embedded coordinator): ", address.status().message()));
    }
    absl::StatusOr<std::string> token = rendezvous.get(kTokenKey);
    if (!token.ok()) {
      return absl::Status(token.status().code(), absl::StrCat("rendezvous get '", kTokenKey,
                                                              "': ", token.status().message()));
    }
    e.address = *address;
    e.token = *token;
    return e;
  }
  if (o.world_size > 1 && !rendezvous.set) {
    return absl::InvalidArgumentError(
        "rank 0 starts the coordinator but has no rendezvous to publish it (give one, or "
        "GRADEX_COORDINATOR)");
  }
  absl::StatusOr<std::string> json = job_json.empty() ? EmbeddedJobConfig(o) : job_json;
  if (!json.ok()) return json.status();
  absl::StatusOr<coordinator::JobSettings> job = coordinator::ParseJobConfig(*json);
  if (!job.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("embedded coordinator: ", job.status().message()));
  }
  const std::string host = o.advertise_host.empty() ? "127.0.0.1" : o.advertise_host;
  coordinator::ServerOptions s;
  s.listen = HostPort(host, 0);
  // Plaintext beyond loopback only when the trainer says the other ranks
  // are elsewhere (MASTER_ADDR / GRADEX_COORDINATOR_HOST): the job token
  // still admits members, as torch's own store is plaintext on that network.
  s.insecure_listen_any = !coordinator::ResolveLoopback(host).ok();
  e.token = o.token.empty() ? FreshToken() : o.token;
  s.token = e.token;
  absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> server =
      coordinator::CoordinatorServer::Start(*job, s);
  if (!server.ok()) {
    return absl::Status(server.status().code(), absl::StrCat("embedded coordinator on ", s.listen,
                                                             ": ", server.status().message()));
  }
  e.server = *std::move(server);
  e.address = HostPort(host, e.server->port());
  if (rendezvous.set) {
    for (auto [key, value] : {std::pair{kCoordinatorKey, &e.address}, {kTokenKey, &e.token}}) {
      if (absl::Status st = rendezvous.set(key, *value); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("rendezvous set '", key, "': ", st.message()));
      }
    }
  }
  return e;
}

}  // namespace gradex::client
