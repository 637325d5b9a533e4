// Mutual TLS with certificates the test makes (openssl CLI): a client signed
// by the job's CA gets in; no certificate, a stranger's certificate or
// plaintext does not. Plaintext listening beyond loopback is refused.
// The server's certificate names only a host no resolver knows: every dial
// goes to 127.0.0.1 and sets the TLS target name, so the test holds on a
// machine without /etc/hosts (a minimal Debian has none).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "member/grpc_control_plane.h"
#include "services/coordinator/server.h"
#include "tests/coordinator/client_util.h"

namespace gradex::coordinator {
namespace {

constexpr char kToken[] = "tls-test-token-0123456789";
constexpr char kServerName[] = "coordinator.gradex.test";

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/gradex-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // EC keys: fast to make. Server: SAN kServerName only; clients: clientAuth.
    const std::string script = R"(set -e
cd ")" + dir_ + R"("
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() { key "$1.key"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 1 -subj "/CN=$1" 2>/dev/null; }
leaf() { key "$1.key"; openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null;
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days 1 -extfile "$1.ext" 2>/dev/null; }
ca jobca; ca rogueca
leaf server jobca "subjectAltName=DNS:)" +
                               std::string(kServerName) + R"("
leaf agent jobca "extendedKeyUsage=clientAuth"
leaf rogue rogueca "extendedKeyUsage=clientAuth"
)";
    std::string path = dir_ + "/make.sh";
    std::ofstream(path) << script;
    ASSERT_EQ(std::system(("timeout 30 bash " + path).c_str()), 0) << "openssl failed";
  }
  static void TearDownTestSuite() { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::unique_ptr<CoordinatorServer> Start() {
    JobSettings job;
    job.job_id = "job";
    job.world_size = 2;
    job.min_world_size = 2;
    job.algorithm = "spardl";
    ServerOptions opts;
    opts.listen = "127.0.0.1:0";
    opts.token = kToken;
    opts.tls = {dir_ + "/server.pem", dir_ + "/server.key", dir_ + "/jobca.pem"};
    auto s = CoordinatorServer::Start(job, opts);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  absl::StatusCode JoinOver(int port, std::shared_ptr<grpc::ChannelCredentials> creds,
                            const std::string& server_name = kServerName) {
    grpc::ChannelArguments args;
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
    auto ch = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), creds, args);
    auto stub = gradex::v1::Coordinator::NewStub(ch);
    return JoinAs(*stub, kToken, "agent", 0).status().code();
  }

  grpc::SslCredentialsOptions Client(const std::string& who) {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = Slurp(dir_ + "/jobca.pem");
    if (!who.empty()) {
      o.pem_private_key = Slurp(dir_ + "/" + who + ".key");
      o.pem_cert_chain = Slurp(dir_ + "/" + who + ".pem");
    }
    return o;
  }

  static std::string dir_;
};
std::string TlsTest::dir_;

TEST_F(TlsTest, MutualTlsAdmitsOnlyTheJobsClients) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  EXPECT_EQ(JoinOver(port, grpc::SslCredentials(Client("agent"))), absl::StatusCode::kOk);
  EXPECT_NE(JoinOver(port, grpc::SslCredentials(Client(""))), absl::StatusCode::kOk);
  EXPECT_NE(JoinOver(port, grpc::SslCredentials(Client("rogue"))), absl::StatusCode::kOk);
  EXPECT_NE(JoinOver(port, grpc::InsecureChannelCredentials()), absl::StatusCode::kOk);
  EXPECT_EQ(server->coordinator().members(), 1u);
}

// The name is checked: a certificate that does not carry the dialled name
// (here the bare IP, or another name) is refused.
TEST_F(TlsTest, ServerNameIsVerified) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  EXPECT_NE(JoinOver(server->port(), grpc::SslCredentials(Client("agent")), ""),
            absl::StatusCode::kOk);
  EXPECT_NE(JoinOver(server->port(), grpc::SslCredentials(Client("agent")), "other.gradex.test"),
            absl::StatusCode::kOk);
  EXPECT_EQ(server->coordinator().members(), 0u);
}

// The agent's own dialling (gradex-agent --tls-ca/--tls-cert/--tls-key
// --tls-server-name) joins over mutual TLS by IP address.
TEST_F(TlsTest, AgentControlPlaneJoinsByAddressWithServerName) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  member::GrpcControlPlaneOptions o;
  o.target = absl::StrCat("127.0.0.1:", server->port());
  o.tls_ca = Slurp(dir_ + "/jobca.pem");
  o.tls_client_cert = Slurp(dir_ + "/agent.pem");
  o.tls_client_key = Slurp(dir_ + "/agent.key");
  o.tls_server_name = kServerName;
  auto cp = member::CreateGrpcControlPlane(o);
  ASSERT_TRUE(cp.ok()) << cp.status();
  member::JoinRequest req;
  req.job = "job";
  req.token = kToken;
  req.agent_id = "tls-agent";
  req.host = "h";
  req.ucx_address = "127.0.0.1:10000";  // a data-plane listener
  req.ucx_version = "1.13";
  req.ucx_transports = "tcp";
  auto reply = (*cp)->Join(req, transport::Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(server->coordinator().members(), 1u);
  EXPECT_TRUE((*cp)->Leave(transport::Clock::now() + std::chrono::seconds(5)).ok());

  o.tls_ca.clear();  // a server name without TLS is a configuration error
  EXPECT_EQ(member::CreateGrpcControlPlane(o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TlsTest, ListeningRules) {
  JobSettings job;
  job.job_id = "job";
  job.algorithm = "spardl";
  ServerOptions opts;
  opts.listen = "0.0.0.0:0";
  EXPECT_EQ(CoordinatorServer::Start(job, opts).status().code(),
            absl::StatusCode::kInvalidArgument);  // plaintext beyond loopback
  opts.listen = "127.0.0.1:0";
  opts.tls = {dir_ + "/server.pem", "", ""};
  EXPECT_EQ(CoordinatorServer::Start(job, opts).status().code(),
            absl::StatusCode::kInvalidArgument);  // cert without key
  opts.tls = {dir_ + "/server.key", dir_ + "/server.key", ""};
  EXPECT_EQ(CoordinatorServer::Start(job, opts).status().code(),
            absl::StatusCode::kInvalidArgument);  // not a certificate
  opts.tls = {"", "", dir_ + "/jobca.pem"};
  EXPECT_EQ(CoordinatorServer::Start(job, opts).status().code(),
            absl::StatusCode::kInvalidArgument);  // client CA without TLS
  opts.tls = {};
  opts.listen = "127.0.0.1:notaport";
  EXPECT_EQ(CoordinatorServer::Start(job, opts).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gradex::coordinator

namespace gradex::coordinator {
namespace {

// An agent without a client certificate under mutual TLS
// is told its handshake was refused, at once, not "no coordinator within
// the join timeout".
TEST_F(TlsTest, AgentWithoutClientCertificateIsToldTheHandshakeWasRefused) {
  auto server = Start();
  ASSERT_NE(server, nullptr);
  member::GrpcControlPlaneOptions o;
  o.target = absl::StrCat("127.0.0.1:", server->port());
  o.tls_server_name = kServerName;
  o.tls_ca = Slurp(dir_ + "/jobca.pem");
  o.join_timeout = std::chrono::milliseconds(20000);
  auto cp = member::CreateGrpcControlPlane(o);
  ASSERT_TRUE(cp.ok()) << cp.status();
  member::JoinRequest r;
  r.job = "job";
  r.token = kToken;
  r.agent_id = "no-cert";
  r.host = "localhost";
  r.ucx_address = "127.0.0.1:10000";
  r.ucx_version = "1.13";
  r.ucx_transports = "tcp";
  const absl::Time t0 = absl::Now();
  auto reply = (*cp)->Join(r, transport::DeadlineIn(std::chrono::milliseconds(2000)));
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("TLS handshake refused"), absl::string_view::npos)
      << reply.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10)) << "waited out the join timeout";
}

}  // namespace
}  // namespace gradex::coordinator
