// Client::Create: checks the options, then ClientImpl finds or starts the
// coordinator, joins it and starts the progress thread (client_impl.h).
#include "services/client/client.h"

#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "catalog/catalog.h"
#include "services/agent/bucket_choice.h"
#include "services/client/client_impl.h"

namespace gradex::client {
namespace {

absl::Status Check(const ClientOptions& o) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("gradex options: ", what));
  };
  if (o.world_size < 1 || o.world_size > 65536) return bad("world_size must be in 1..65536");
  if (o.rank < 0 || o.rank >= o.world_size) {
    return bad(absl::StrCat("rank ", o.rank, " is not in 0..", o.world_size - 1));
  }
  if (o.local_rank < 0) return bad("local_rank must be >= 0");
  if (o.algorithm != "auto" && catalog::Find(o.algorithm) == nullptr) {
    return bad(absl::StrCat("algorithm '", o.algorithm.substr(0, 64), "' unknown; known: auto, ",
                            catalog::NameList()));
  }
  if (!(o.density > 0 && o.density <= 1)) return bad("density must be in (0, 1]");
  if (o.teams < 0 || o.teams > o.world_size) return bad("teams must be in 0..world_size");
  if (!(o.min_compression_rate >= 0) || std::isinf(o.min_compression_rate)) {
    return bad("min_compression_rate must be a number >= 0");
  }
  // The agent's bounds, which every rank's in-band agreement also checks.
  agent::BucketRules rules;
  rules.start_iter = o.start_iter;
  rules.min_compression_rate = o.min_compression_rate;
  rules.dense_probe_period = o.dense_probe_period;
  if (absl::Status s = agent::CheckBucketRules(rules); !s.ok())
    return bad(std::string(s.message()));
  if (o.timeout.count() < 1 || o.timeout > std::chrono::hours(24)) {
    return bad("timeout must be in 1 ms..24 h");
  }
  if (o.tls_client_cert.empty() != o.tls_client_key.empty()) {
    return bad("tls_client_cert and tls_client_key go together (mutual TLS)");
  }
  if (!o.tls_client_cert.empty() && o.tls_ca.empty()) {
    return bad("a TLS client certificate needs tls_ca (GRADEX_TLS_CA_FILE)");
  }
  if (!o.tls_ca.empty() && o.coordinator.empty()) {
    return bad("TLS applies to a coordinator given by address (GRADEX_COORDINATOR)");
  }
  if (absl::Status s = CheckMetricsPort(o); !s.ok()) return bad(std::string(s.message()));
  if (o.max_bucket_elements == 0 || o.max_bucket_elements > (size_t{1} << 31)) {
    return bad("max_bucket_elements must be in 1..2^31");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options,
                                                       Rendezvous rendezvous) {
  if (absl::Status s = Check(options); !s.ok()) return s;
  auto client = std::make_unique<ClientImpl>(std::move(options));
  if (absl::Status s = client->Start(rendezvous); !s.ok()) return s;
  return client;
}

std::future<absl::Status> Client::AllreduceAsync(uint64_t bucket, std::span<float> data,
                                                 bool last_in_step) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> f = promise->get_future();
  AllreduceAsync({ParamSpan{bucket, data.size()}}, data, Memory::kHost, last_in_step,
                 [promise](absl::Status s) { promise->set_value(std::move(s)); });
  return f;
}

}  // namespace gradex::client
