// Client::Create: checks the options, then ClientImpl finds or starts the
// coordinator, joins it and starts the progress thread (client_impl.h).
#include "services/client/client.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "services/client/client_impl.h"
#include "services/client/option_table.h"

namespace gradex::client {
namespace {

// Each option's own range is the option table's; here the rules between
// options.
absl::Status Check(const ClientOptions& o) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("gradex options: ", what));
  };
  if (absl::Status s = CheckOptionValues(o); !s.ok()) return bad(std::string(s.message()));
  if (o.rank >= o.world_size) {
    return bad(absl::StrCat("rank ", o.rank, " is not in 0..", o.world_size - 1));
  }
  if (o.teams > o.world_size) return bad("teams must be in 0..world_size");
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
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options, Rendezvous rendezvous,
                                                       device::Backend* device) {
  if (absl::Status s = Check(options); !s.ok()) return s;
  auto client = std::make_unique<ClientImpl>(std::move(options), device);
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
