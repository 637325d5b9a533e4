// The per-job token every RPC must carry (metadata `authorization: Bearer
// <token>`), and the server's TLS credentials.
#ifndef GRADEX_SERVICES_COORDINATOR_AUTH_H_
#define GRADEX_SERVICES_COORDINATOR_AUTH_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

namespace gradex::coordinator {

// Reads a token file: the secret is the file's content without trailing
// whitespace; 16..4096 printable ASCII bytes (a short token is a weak one).
absl::StatusOr<std::string> LoadToken(const std::string& path);

class TokenAuth {
 public:
  // An empty token disables the check (loopback-only development setups).
  explicit TokenAuth(std::string token) : token_(std::move(token)) {}
  bool enabled() const { return !token_.empty(); }
  // True when the call's metadata carries the job's token. Compares in time
  // independent of where the strings first differ.
  bool Check(const grpc::CallbackServerContext& ctx) const;

 private:
  std::string token_;
};

struct TlsFiles {
  std::string cert, key, client_ca;  // paths; client_ca empty: no client certificates
};
// TLS credentials from PEM files; with client_ca, clients must present a
// certificate signed by it (mutual TLS).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTlsCredentials(const TlsFiles& f);

// Reads a whole (small) file.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes);

}  // namespace gradex::coordinator

#endif  // GRADEX_SERVICES_COORDINATOR_AUTH_H_
