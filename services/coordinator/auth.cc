#include "services/coordinator/auth.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "services/coordinator/limits.h"

namespace gradex::coordinator {

absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::ostringstream buf;
  buf << in.rdbuf();
  std::string s = buf.str();
  if (s.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is over ", max_bytes, " bytes"));
  }
  return s;
}

absl::StatusOr<std::string> LoadToken(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFile(path, kMaxTokenBytes + 64);
  if (!s.ok()) return s.status();
  std::string t = *s;
  while (!t.empty() &&
         (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) {
    t.pop_back();
  }
  if (t.size() < 16 || t.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "': the token must be 16..4096 bytes"));
  }
  for (unsigned char c : t) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file '", path, "': the token must be printable ASCII, no spaces"));
    }
  }
  return t;
}

bool TokenAuth::Check(const grpc::CallbackServerContext& ctx) const {
  if (token_.empty()) return true;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return false;
  absl::string_view v(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (v.size() != kBearer.size() + token_.size() || v.substr(0, kBearer.size()) != kBearer) {
    return false;
  }
  v.remove_prefix(kBearer.size());
  unsigned char diff = 0;
  for (size_t i = 0; i < token_.size(); ++i) diff |= static_cast<unsigned char>(v[i] ^ token_[i]);
  return diff == 0;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTlsCredentials(const TlsFiles& f) {
  constexpr size_t kMaxPem = 1 << 20;
  absl::StatusOr<std::string> cert = ReadFile(f.cert, kMaxPem);
  if (!cert.ok())
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert: ", cert.status().message()));
  absl::StatusOr<std::string> key = ReadFile(f.key, kMaxPem);
  if (!key.ok())
    return absl::InvalidArgumentError(absl::StrCat("--tls-key: ", key.status().message()));
  if (cert->find("BEGIN CERTIFICATE") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert '", f.cert, "' is not a PEM certificate"));
  }
  if (key->find("PRIVATE KEY") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key '", f.key, "' is not a PEM private key"));
  }
  grpc::SslServerCredentialsOptions opts(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  opts.pem_key_cert_pairs.push_back({*key, *cert});
  if (!f.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadFile(f.client_ca, kMaxPem);
    if (!ca.ok())
      return absl::InvalidArgumentError(absl::StrCat("--client-ca: ", ca.status().message()));
    if (ca->find("BEGIN CERTIFICATE") == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--client-ca '", f.client_ca, "' is not a PEM certificate"));
    }
    opts.pem_root_certs = *ca;
    opts.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(opts);
}

}  // namespace gradex::coordinator
