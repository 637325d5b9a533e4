// ApplyEnvironment: torchrun's and gradex's variables, and a clear
// INVALID_ARGUMENT naming the variable for each malformed one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "services/client/client.h"

namespace gradex::client {
namespace {

const char* const kVars[] = {"GRADEX_COORDINATOR",
                             "GRADEX_TOKEN",
                             "GRADEX_TOKEN_FILE",
                             "RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "MASTER_ADDR",
                             "GRADEX_COORDINATOR_HOST",
                             "GRADEX_METRICS_PORT",
                             "GRADEX_DATA_IP",
                             "GRADEX_TIMELINE",
                             "GRADEX_JOB",
                             "GRADEX_METRICS_ADDR",
                             "GRADEX_TLS_CA_FILE",
                             "GRADEX_TLS_CERT_FILE",
                             "GRADEX_TLS_KEY_FILE",
                             "GRADEX_TLS_SERVER_NAME",
                             "GRADEX_PIPELINE"};

class EnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(EnvironmentTest, TorchrunAndGradexVariables) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.5", 1);
  setenv("GRADEX_METRICS_PORT", "9400", 1);
  setenv("GRADEX_DATA_IP", "10.0.0.7", 1);
  setenv("GRADEX_TIMELINE", "/tmp/t.json", 1);
  setenv("GRADEX_PIPELINE", "0", 1);
  setenv("GRADEX_COORDINATOR", "coord.example:50051", 1);
  setenv("GRADEX_JOB", "train1-gradex", 1);
  setenv("GRADEX_METRICS_ADDR", "0.0.0.0", 1);
  const std::string file = ::testing::TempDir() + "/gradex_token";
  std::ofstream(file) << "  s3cret\n";
  setenv("GRADEX_TOKEN_FILE", file.c_str(), 1);
  ClientOptions o;
  ASSERT_TRUE(ApplyEnvironment(&o).ok());
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.local_rank, 1);
  EXPECT_EQ(o.advertise_host, "10.0.0.5");
  EXPECT_EQ(o.metrics_port, 9400);
  EXPECT_EQ(o.data_ip, "10.0.0.7");
  EXPECT_EQ(o.timeline_path, "/tmp/t.json");
  EXPECT_FALSE(o.pipeline) << "GRADEX_PIPELINE=0 turns the overlap off";
  EXPECT_EQ(o.coordinator, "coord.example:50051");
  EXPECT_EQ(o.token, "s3cret");
  EXPECT_EQ(o.job, "train1-gradex");
  EXPECT_EQ(o.metrics_address, "0.0.0.0");
  EXPECT_TRUE(o.tls_ca.empty());
  const std::string ca = ::testing::TempDir() + "/gradex_ca.crt";
  std::ofstream(ca) << "-----BEGIN CERTIFICATE-----\nx\n";
  setenv("GRADEX_TLS_CA_FILE", ca.c_str(), 1);
  setenv("GRADEX_TLS_CERT_FILE", ca.c_str(), 1);
  setenv("GRADEX_TLS_KEY_FILE", ca.c_str(), 1);
  setenv("GRADEX_TLS_SERVER_NAME", "gx-gradex-coordinator.ml.svc", 1);
  ASSERT_TRUE(ApplyEnvironment(&o).ok());
  EXPECT_EQ(o.tls_ca, "-----BEGIN CERTIFICATE-----\nx\n");
  EXPECT_EQ(o.tls_client_cert, o.tls_ca);
  EXPECT_EQ(o.tls_client_key, o.tls_ca);
  EXPECT_EQ(o.tls_server_name, "gx-gradex-coordinator.ml.svc");
  setenv("GRADEX_COORDINATOR_HOST", "node0", 1);
  ASSERT_TRUE(ApplyEnvironment(&o).ok());
  EXPECT_EQ(o.advertise_host, "node0") << "GRADEX_COORDINATOR_HOST wins over MASTER_ADDR";
}

TEST_F(EnvironmentTest, NothingSetChangesNothing) {
  ClientOptions o;
  o.rank = 1;
  o.world_size = 2;
  ASSERT_TRUE(ApplyEnvironment(&o).ok());
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 2);
  EXPECT_TRUE(o.coordinator.empty());
  EXPECT_EQ(o.job, "gradex");
  EXPECT_EQ(o.metrics_address, "127.0.0.1") << "the metrics endpoint stays on loopback by default";
  EXPECT_TRUE(o.pipeline);
}

TEST_F(EnvironmentTest, MalformedValuesNameTheVariable) {
  struct Case {
    const char* var;
    const char* value;
  };
  const std::string missing = ::testing::TempDir() + "/no_such_token_file";
  const std::string long_job(129, 'j');
  const std::string empty = ::testing::TempDir() + "/gradex_empty_file";
  std::ofstream(empty) << "\n";
  for (Case c :
       {Case{"RANK", "x"}, Case{"RANK", "-1"}, Case{"WORLD_SIZE", "0"}, Case{"WORLD_SIZE", "1e3"},
        Case{"LOCAL_RANK", "two"}, Case{"GRADEX_METRICS_PORT", "70000"},
        Case{"GRADEX_COORDINATOR", "nohost"}, Case{"GRADEX_COORDINATOR", "host:99999"},
        Case{"GRADEX_COORDINATOR", ":80"}, Case{"MASTER_ADDR", "a b"}, Case{"GRADEX_JOB", "a/b"},
        Case{"GRADEX_JOB", long_job.c_str()}, Case{"GRADEX_METRICS_ADDR", "0.0.0.0:9400"},
        Case{"GRADEX_METRICS_ADDR", "a b"}, Case{"GRADEX_TOKEN_FILE", missing.c_str()},
        Case{"GRADEX_PIPELINE", "yes"}}) {
    SetUp();
    setenv(c.var, c.value, 1);
    ClientOptions o;
    absl::Status s = ApplyEnvironment(&o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.var << "=" << c.value;
    EXPECT_NE(s.message().find(c.var), std::string::npos) << s;
  }
  SetUp();
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  ClientOptions o;
  absl::Status s = ApplyEnvironment(&o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("RANK"), std::string::npos) << s;
}

}  // namespace
}  // namespace gradex::client
