// gradex-health-probe: asks a gRPC server's standard health service
// (grpc.health.v1.Health/Check) whether it is SERVING. Exit 0 when it is,
// 1 when it is not or cannot be reached, 2 on bad flags. Kubernetes' native
// grpc probe speaks plaintext only; this is the exec probe for a coordinator
// behind TLS (the image has no shell, so no grpc_health_probe script).
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "services/coordinator/health_probe.h"
#include "version/version.h"

namespace {

constexpr char kUsage[] =
    "usage: gradex-health-probe --addr HOST:PORT [--service NAME] [--timeout-ms MS]\n"
    "                           [--tls-ca FILE [--tls-server-name NAME]\n"
    "                            [--tls-cert FILE --tls-key FILE]]\n"
    "  --addr HOST:PORT      the server (required)\n"
    "  --service NAME        the service to ask about; empty (default): the server as a whole\n"
    "  --timeout-ms MS       deadline of the call, 1..60000 (default 1000)\n"
    "  --tls-ca FILE         use TLS, trusting the CA certificates in FILE\n"
    "  --tls-server-name N   the name the certificate must carry (default: HOST)\n"
    "  --tls-cert/--tls-key  a client certificate, for a server that asks for one\n"
    "exit status: 0 SERVING, 1 anything else (the status or error is printed), 2 bad flags\n";

int Usage(const std::string& msg) {
  std::fprintf(stderr, "gradex-health-probe: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return static_cast<bool>(f) || f.eof();
}

}  // namespace

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-health-probe")) return 0;
  std::string addr, service, ca, server_name, cert, key;
  int timeout_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string v;  // --flag=value or --flag value
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      return Usage(absl::StrCat("unknown flag or missing value: ", a));
    }
    if (a == "--addr") {
      addr = v;
    } else if (a == "--service") {
      service = v;
    } else if (a == "--timeout-ms") {
      if (!absl::SimpleAtoi(v, &timeout_ms) || timeout_ms < 1 || timeout_ms > 60000) {
        return Usage(absl::StrCat("--timeout-ms: '", v, "' is not 1..60000"));
      }
    } else if (a == "--tls-ca") {
      ca = v;
    } else if (a == "--tls-server-name") {
      server_name = v;
    } else if (a == "--tls-cert") {
      cert = v;
    } else if (a == "--tls-key") {
      key = v;
    } else {
      return Usage(absl::StrCat("unknown flag ", a));
    }
  }
  if (addr.empty()) return Usage("--addr is required");
  if (ca.empty() && (!server_name.empty() || !cert.empty() || !key.empty())) {
    return Usage("--tls-server-name, --tls-cert and --tls-key need --tls-ca");
  }
  if (cert.empty() != key.empty()) return Usage("--tls-cert and --tls-key go together");
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!ca.empty()) {
    grpc::SslCredentialsOptions o;
    if (!ReadFile(ca, &o.pem_root_certs)) return Usage(absl::StrCat("cannot read --tls-ca ", ca));
    if (!cert.empty() &&
        (!ReadFile(cert, &o.pem_cert_chain) || !ReadFile(key, &o.pem_private_key))) {
      return Usage("cannot read --tls-cert/--tls-key");
    }
    creds = grpc::SslCredentials(o);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  }
  absl::StatusOr<gradex::coordinator::ServingStatus> st = gradex::coordinator::CheckHealth(
      grpc::CreateCustomChannel(addr, creds, args), service, absl::Milliseconds(timeout_ms));
  if (!st.ok()) {
    std::fprintf(stderr, "gradex-health-probe: %s: %s\n", addr.c_str(),
                 std::string(st.status().ToString()).c_str());
    return 1;
  }
  std::printf("%s: %s\n", addr.c_str(), gradex::coordinator::ServingStatusName(*st));
  return *st == gradex::coordinator::ServingStatus::kServing ? 0 : 1;
}
