#include "tests/coordinator/client_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/support/byte_buffer.h"
#include "version/version.h"

namespace gradex::coordinator {

void SetAuth(grpc::ClientContext* ctx, const std::string& token, absl::Duration deadline) {
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
}

gradex::v1::JoinRequest JoinRequestFor(const std::string& agent, int local_rank) {
  gradex::v1::JoinRequest r;
  r.set_job_id("job");
  r.set_agent_id(agent);
  r.set_host("localhost");
  r.set_local_rank(local_rank);
  r.set_device("cpu");
  r.set_ucx_address("127.0.0.1:" + std::to_string(10000 + local_rank));
  r.set_wire_protocol(gradex::version::kWireProtocol);
  r.set_ucx_version("1.13");
  r.set_ucx_transports("tcp");
  return r;
}

absl::StatusOr<gradex::v1::JoinResponse> JoinWith(gradex::v1::Coordinator::StubInterface& stub,
                                                  const std::string& token,
                                                  const gradex::v1::JoinRequest& r) {
  grpc::ClientContext ctx;
  SetAuth(&ctx, token, absl::Seconds(5));
  gradex::v1::JoinResponse resp;
  grpc::Status st = stub.Join(&ctx, r, &resp);
  if (!st.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()), st.error_message());
  }
  return resp;
}

absl::StatusOr<gradex::v1::JoinResponse> JoinAs(gradex::v1::Coordinator::StubInterface& stub,
                                                const std::string& token, const std::string& agent,
                                                int local_rank) {
  return JoinWith(stub, token, JoinRequestFor(agent, local_rank));
}

grpc::Status Heartbeat(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
                       uint64_t member, const std::string& secret, uint64_t next_step) {
  grpc::ClientContext ctx;
  SetAuth(&ctx, token, absl::Seconds(5));
  gradex::v1::HeartbeatRequest r;
  r.set_member_id(member);
  r.set_member_secret(secret);
  r.set_next_step(next_step);
  gradex::v1::HeartbeatResponse resp;
  return stub.Heartbeat(&ctx, r, &resp);
}

grpc::Status SendReports(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
                         const std::vector<gradex::v1::StepReport>& reports,
                         gradex::v1::ReportAck* ack) {
  grpc::ClientContext ctx;
  SetAuth(&ctx, token, absl::Seconds(5));
  auto w = stub.ReportSteps(&ctx, ack);
  for (const auto& r : reports) {
    if (!w->Write(r)) break;  // the server ended the stream; Finish says why
  }
  w->WritesDone();
  return w->Finish();
}

grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& token, const std::string& method,
                     const std::string& bytes) {
  grpc::ClientContext ctx;
  SetAuth(&ctx, token, absl::Seconds(5));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status result;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp, [&](grpc::Status st) {
    std::lock_guard<std::mutex> l(mu);
    result = st;
    done = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(mu);
  // The context deadline ends the call; this bound only guards the test.
  if (!cv.wait_for(l, std::chrono::seconds(10), [&] { return done; })) {
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no callback");
  }
  return result;
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[8192];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0 && body.size() < (8u << 20))
        body.append(buf, n);
    }
  }
  close(fd);
  return body;
}

std::map<std::string, double> ScrapeGradexSamples(int port) {
  const std::string body = HttpGet(port, "/metrics");
  std::map<std::string, double> out;
  std::istringstream in(body.substr(std::min(body.size(), body.find("\r\n\r\n"))));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("gradex_", 0) != 0) continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

PlanStream::PlanStream(gradex::v1::Coordinator::StubInterface& stub, const std::string& token,
                       uint64_t member, const std::string& secret, absl::Duration deadline) {
  SetAuth(&ctx_, token, deadline);
  gradex::v1::WatchPlanRequest r;
  r.set_member_id(member);
  r.set_member_secret(secret);
  reader_ = stub.WatchPlan(&ctx_, r);
}

bool PlanStream::NextUntil(gradex::v1::Plan* p,
                           const std::function<bool(const gradex::v1::Plan&)>& want) {
  while (reader_->Read(p)) {
    if (want(*p)) return true;
  }
  return false;
}

grpc::Status PlanStream::Drain() {
  gradex::v1::Plan p;
  while (reader_->Read(&p)) {
  }
  return reader_->Finish();
}

}  // namespace gradex::coordinator
