// A hostile (or broken) member for tests/hostile/hostile_test.sh: a gRPC
// client that holds the job token and plays a member the way an attacker or
// a misconfigured pod would. Every call has a deadline; each
// action prints one line per call, "ACTION: CODE: message", and exits 0
// (the script judges), 2 on bad usage.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "transport/ucx/ucx_transport.h"
#include "version/version.h"

namespace {

namespace pb = gradex::v1;

constexpr char kUsage[] =
    R"(usage: hostile_member --coordinator HOST:PORT --token-file F --job J ACTION [ARG]
  join-address HEX        Join with ucx_address = the bytes HEX (e.g. 07 x64)
  join-version V          Join with a valid address but UCX version V
  rejoin EPOCH WORLD      a restart-style Join: last_epoch EPOCH, last_world_size WORLD
  heartbeat-step STEP     Join, then Heartbeat with next_step STEP
  flood N                 N Joins with distinct agent ids; prints the counts by code
  impersonate             Join, read the plan, then Heartbeat / ReportSteps / Leave as
                          every other member with this member's secret
  join-unreachable        Join with a valid address where nothing listens, then leave
                          the lease to expire (never heartbeat)
  heartbeat-idle SECONDS  Join with the address of a TCP socket that listens but never
                          accepts (a data plane that never answers), then Heartbeat every
                          lease / 3 for SECONDS, never entering an epoch; prints how the
                          heartbeats ended ("evicted after S s: CODE: message" or "alive")
  takeover SECONDS        Join, read the plan, then for SECONDS re-Join every 200 ms under
                          every other member's agent id (without its secret); prints the
                          counts by code and the last refusal
  watch-flood N           Join, then open N WatchPlan streams of this member, each after the
                          previous one delivered a plan, none closed by this side; holds
                          them 2 s, then cancels them and prints how they ended, by code
  idle-connections N SECONDS
                          open N TCP connections to the coordinator's port that never send
                          a byte, hold them SECONDS, then close them; prints how many
                          connected and how many the coordinator closed meanwhile
  fuzz-ports N SECONDS PID...
                          for every TCP port each PID listens on (its sockets in
                          /proc/PID/net/tcp{,6}), N connections (at most SECONDS per
                          port), each sending 1..4096 random bytes and closing; prints
                          "fuzz: pid P port Q: C connections, R refused" per port
  --help                  this text
)";

struct Ctx {
  std::unique_ptr<pb::Coordinator::Stub> stub;
  std::string token, job;
  int port = 0;  // the coordinator's (on loopback), for raw TCP
};

void Prepare(grpc::ClientContext& c, const Ctx& x) {
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  c.AddMetadata("authorization", "Bearer " + x.token);
}

void Print(const std::string& what, const grpc::Status& s) {
  std::printf("%s: %d: %s\n", what.c_str(), static_cast<int>(s.error_code()),
              s.error_message().c_str());
  std::fflush(stdout);
}

pb::JoinRequest Base(const Ctx& x, const std::string& agent) {
  pb::JoinRequest r;
  r.set_job_id(x.job);
  r.set_agent_id(agent);
  r.set_host("hostile-host");
  r.set_ucx_address("127.0.0.1:1");  // nothing listens on port 1
  r.set_ucx_version(
      gradex::transport::ucx::UcxVersion());  // the agents' own: only the named fields are hostile
  r.set_ucx_transports("tcp");
  r.set_wire_protocol(gradex::version::kWireProtocol);
  return r;
}

grpc::Status Join(const Ctx& x, const pb::JoinRequest& r, pb::JoinResponse* out) {
  grpc::ClientContext c;
  Prepare(c, x);
  return x.stub->Join(&c, r, out);
}

// The first plan `me`'s WatchPlan stream delivers; the stream is cancelled
// after it. Prints the stream's status and returns nullopt when none came.
std::optional<pb::Plan> FirstPlan(const Ctx& x, const pb::JoinResponse& me) {
  pb::WatchPlanRequest w;
  w.set_member_id(me.member_id());
  w.set_member_secret(me.member_secret());
  grpc::ClientContext c;
  Prepare(c, x);
  auto reader = x.stub->WatchPlan(&c, w);
  pb::Plan plan;
  if (!reader->Read(&plan)) {
    Print("watch", reader->Finish());
    return std::nullopt;
  }
  c.TryCancel();
  return plan;
}

// The TCP ports `pid` listens on: its socket inodes (/proc/PID/fd) that are
// in state LISTEN (0A) in its network namespace's tables.
std::vector<int> ListeningPorts(int pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = absl::StrCat("/proc/", pid, "/fd");
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    const std::string link = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
  }
  std::set<int> ports;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in(absl::StrCat("/proc/", pid, "/net/", table));
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;
      ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
    }
  }
  return {ports.begin(), ports.end()};
}

// n connections to 127.0.0.1:port within `budget`, each sending 1..4096
// random bytes; returns {connected, refused}.
std::pair<int, int> FuzzPort(int port, int n, std::chrono::seconds budget, std::mt19937& rng) {
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto end = std::chrono::steady_clock::now() + budget;
  int connected = 0, refused = 0;
  std::vector<char> bytes(4096);
  for (int i = 0; i < n && std::chrono::steady_clock::now() < end; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ++refused;
      close(fd);
      continue;
    }
    ++connected;
    // Zeros a quarter of the time: 17 zero bytes aborted UCX 1.13's listener.
    const size_t len = 1 + rng() % 4096;
    const bool zeros = rng() % 4 == 0;
    for (size_t k = 0; k < len; ++k) bytes[k] = zeros ? 0 : static_cast<char>(rng());
    (void)send(fd, bytes.data(), len, MSG_NOSIGNAL | MSG_DONTWAIT);
    close(fd);
  }
  return {connected, refused};
}

int Run(const Ctx& x, const std::string& action, const std::vector<std::string>& args) {
  pb::JoinResponse me;
  if (action == "fuzz-ports" && args.size() >= 3) {
    int n = 0, seconds = 0;
    if (!absl::SimpleAtoi(args[0], &n) || n < 1 || !absl::SimpleAtoi(args[1], &seconds) ||
        seconds < 1) {
      return 2;
    }
    std::mt19937 rng(std::random_device{}());
    for (size_t i = 2; i < args.size(); ++i) {
      int pid = 0;
      if (!absl::SimpleAtoi(args[i], &pid)) return 2;
      const std::vector<int> ports = ListeningPorts(pid);
      if (ports.empty()) std::printf("fuzz: pid %d: no listening port\n", pid);
      for (int port : ports) {
        const auto [connected, refused] = FuzzPort(port, n, std::chrono::seconds(seconds), rng);
        std::printf("fuzz: pid %d port %d: %d connections, %d refused\n", pid, port, connected,
                    refused);
        std::fflush(stdout);
      }
    }
    return 0;
  }
  if (action == "join-address" && args.size() == 1) {
    std::string bytes;
    for (size_t i = 0; i + 1 < args[0].size(); i += 2) {
      int v = 0;
      if (!absl::SimpleHexAtoi(args[0].substr(i, 2), &v)) return 2;
      bytes.push_back(static_cast<char>(v));
    }
    pb::JoinRequest r = Base(x, "hostile-address");
    r.set_ucx_address(bytes);
    r.set_wire_protocol(gradex::version::kWireProtocol);
    Print("join", Join(x, r, &me));
  } else if (action == "join-version" && args.size() == 1) {
    pb::JoinRequest r = Base(x, "hostile-version");
    r.set_ucx_version(args[0]);
    Print("join", Join(x, r, &me));
  } else if (action == "rejoin" && args.size() == 2) {
    uint64_t epoch = 0;
    int world = 0;
    if (!absl::SimpleAtoi(args[0], &epoch) || !absl::SimpleAtoi(args[1], &world)) return 2;
    pb::JoinRequest r = Base(x, "hostile-rejoin");
    r.set_last_epoch(epoch);
    r.set_last_rank(0);
    r.set_last_world_size(world);
    Print("join", Join(x, r, &me));
  } else if (action == "heartbeat-step" && args.size() == 1) {
    uint64_t step = 0;
    if (!absl::SimpleAtoi(args[0], &step)) return 2;
    Print("join", Join(x, Base(x, "hostile-step"), &me));
    pb::HeartbeatRequest h;
    h.set_member_id(me.member_id());
    h.set_member_secret(me.member_secret());
    h.set_next_step(step);
    pb::HeartbeatResponse hr;
    grpc::ClientContext c;
    Prepare(c, x);
    Print("heartbeat", x.stub->Heartbeat(&c, h, &hr));
  } else if (action == "flood" && args.size() == 1) {
    int n = 0;
    if (!absl::SimpleAtoi(args[0], &n) || n < 1 || n > 100000) return 2;
    std::map<int, int> codes;
    std::string last;
    for (int i = 0; i < n; ++i) {
      grpc::Status s = Join(x, Base(x, absl::StrCat("flood-", i)), &me);
      ++codes[s.error_code()];
      if (!s.ok()) last = s.error_message();
    }
    for (auto [code, count] : codes) std::printf("flood: code %d: %d joins\n", code, count);
    std::printf("flood: last refusal: %s\n", last.c_str());
  } else if (action == "impersonate" && args.empty()) {
    Print("join", Join(x, Base(x, "hostile-impostor"), &me));
    std::optional<pb::Plan> plan = FirstPlan(x, me);
    if (!plan) return 0;
    for (const pb::Member& m : plan->members()) {
      const std::string who = absl::StrCat(" as rank ", m.rank());
      pb::HeartbeatRequest h;
      h.set_member_id(m.member_id());
      h.set_member_secret(me.member_secret());
      pb::HeartbeatResponse hr;
      grpc::ClientContext hc;
      Prepare(hc, x);
      Print("heartbeat" + who, x.stub->Heartbeat(&hc, h, &hr));
      pb::StepReport rep;
      rep.set_member_id(m.member_id());
      rep.set_member_secret(me.member_secret());
      rep.set_epoch(plan->epoch());
      rep.set_step(1);
      rep.set_error("forged failure");
      pb::ReportAck ack;
      grpc::ClientContext rc;
      Prepare(rc, x);
      auto writer = x.stub->ReportSteps(&rc, &ack);
      writer->Write(rep);
      writer->WritesDone();
      Print("report" + who, writer->Finish());
      pb::LeaveRequest l;
      l.set_member_id(m.member_id());
      l.set_member_secret(me.member_secret());
      l.set_reason("forged\nleave");
      pb::LeaveResponse lr;
      grpc::ClientContext lc;
      Prepare(lc, x);
      Print("leave" + who, x.stub->Leave(&lc, l, &lr));
    }
  } else if (action == "heartbeat-idle" && args.size() == 1) {
    int seconds = 0;
    if (!absl::SimpleAtoi(args[0], &seconds) || seconds < 1 || seconds > 3600) return 2;
    // Listens (the kernel completes TCP handshakes into the backlog) and never
    // accepts: UCX connects and then waits forever for the wire-up.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(fd, 64) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      std::perror("hostile_member: listen");
      return 2;
    }
    pb::JoinRequest r = Base(x, "hostile-idle");
    r.set_ucx_address(absl::StrCat("127.0.0.1:", ntohs(a.sin_port)));
    r.set_wire_protocol(gradex::version::kWireProtocol);
    grpc::Status joined = Join(x, r, &me);
    Print("join", joined);
    if (!joined.ok()) return 0;
    const auto start = std::chrono::steady_clock::now();
    const auto interval =
        std::chrono::milliseconds(std::max<uint32_t>(me.heartbeat_interval_ms(), 1));
    for (;;) {
      pb::HeartbeatRequest h;
      h.set_member_id(me.member_id());
      h.set_member_secret(me.member_secret());
      pb::HeartbeatResponse hr;
      grpc::ClientContext c;
      Prepare(c, x);
      grpc::Status s = x.stub->Heartbeat(&c, h, &hr);
      const double t =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (!s.ok()) {
        std::printf("heartbeat-idle: evicted after %.1f s: %d: %s\n", t,
                    static_cast<int>(s.error_code()), s.error_message().c_str());
        break;
      }
      if (t >= seconds) {
        std::printf("heartbeat-idle: alive after %.1f s\n", t);
        break;
      }
      std::this_thread::sleep_for(interval);
    }
    close(fd);
  } else if (action == "takeover" && args.size() == 1) {
    int seconds = 0;
    if (!absl::SimpleAtoi(args[0], &seconds) || seconds < 1 || seconds > 3600) return 2;
    grpc::Status joined = Join(x, Base(x, "hostile-takeover"), &me);
    Print("join", joined);
    if (!joined.ok()) return 0;
    std::optional<pb::Plan> plan = FirstPlan(x, me);
    if (!plan) return 0;
    std::vector<std::string> victims;
    for (const pb::Member& m : plan->members()) {
      if (m.agent_id() != "hostile-takeover") victims.push_back(m.agent_id());
    }
    std::map<int, int> codes;
    std::string last;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end) {
      for (const std::string& id : victims) {
        pb::JoinRequest r = Base(x, id);
        r.set_host("hostile-host");
        pb::JoinResponse got;
        grpc::Status s = Join(x, r, &got);
        ++codes[s.error_code()];
        if (!s.ok()) last = s.error_message();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    for (auto [code, count] : codes) std::printf("takeover: code %d: %d joins\n", code, count);
    std::printf("takeover: last refusal: %s\n", last.c_str());
  } else if (action == "watch-flood" && args.size() == 1) {
    int n = 0;
    if (!absl::SimpleAtoi(args[0], &n) || n < 1 || n > 100000) return 2;
    grpc::Status joined = Join(x, Base(x, "hostile-watcher"), &me);
    Print("join", joined);
    if (!joined.ok()) return 0;
    pb::WatchPlanRequest w;
    w.set_member_id(me.member_id());
    w.set_member_secret(me.member_secret());
    struct Stream {
      std::unique_ptr<grpc::ClientContext> ctx;
      std::unique_ptr<grpc::ClientReader<pb::Plan>> reader;
    };
    // Each stream is opened after the previous one delivered its first plan
    // (so the coordinator holds it), and none is closed by this side until
    // the end.
    std::vector<Stream> streams;
    streams.reserve(n);
    int no_plan = 0;
    for (int i = 0; i < n; ++i) {
      Stream st;
      st.ctx = std::make_unique<grpc::ClientContext>();
      st.ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
      st.ctx->AddMetadata("authorization", "Bearer " + x.token);
      st.reader = x.stub->WatchPlan(st.ctx.get(), w);
      pb::Plan plan;
      if (!st.reader->Read(&plan)) ++no_plan;
      streams.push_back(std::move(st));
    }
    std::printf("watch-flood: %d streams opened, %d without a plan\n", n, no_plan);
    std::fflush(stdout);
    // Held for a moment, so that the coordinator's memory can be read with
    // every stream this side opened still open.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    std::map<int, int> codes;
    std::string last;
    // The newest stream is cancelled first; the older ones are read to their
    // end as the coordinator ended them, and those still open 5 s later are
    // cancelled (then they end CANCELLED).
    streams.back().ctx->TryCancel();
    std::atomic<bool> done{false};
    std::thread watchdog([&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      for (Stream& st : streams) st.ctx->TryCancel();
    });
    for (Stream& st : streams) {
      pb::Plan plan;
      while (st.reader->Read(&plan)) {
      }
      grpc::Status s = st.reader->Finish();
      ++codes[s.error_code()];
      if (s.error_code() != grpc::StatusCode::CANCELLED) last = s.error_message();
    }
    done.store(true);
    watchdog.join();
    for (auto [code, count] : codes) std::printf("watch-flood: code %d: %d streams\n", code, count);
    std::printf("watch-flood: last ended by the coordinator: %s\n", last.c_str());
  } else if (action == "idle-connections" && args.size() == 2) {
    int n = 0, seconds = 0;
    if (!absl::SimpleAtoi(args[0], &n) || n < 1 || n > 100000 ||
        !absl::SimpleAtoi(args[1], &seconds) || seconds < 0 || seconds > 3600) {
      return 2;
    }
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(x.port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::vector<int> fds;
    int failed = 0;
    for (int i = 0; i < n; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) {
        std::perror("hostile_member: socket");
        break;
      }
      if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        ++failed;
        close(fd);
        continue;
      }
      fds.push_back(fd);
    }
    std::printf("idle-connections: %zu connected, %d refused\n", fds.size(), failed);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    int closed = 0;
    for (int fd : fds) {
      // What the coordinator sent (its HTTP/2 SETTINGS, a GOAWAY) is read
      // past; then 0 (or a reset) means it closed the connection.
      char b[4096];
      for (;;) {
        const ssize_t got = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (got > 0) continue;
        if (got == 0 || errno == ECONNRESET) ++closed;
        break;
      }
      close(fd);
    }
    std::printf("idle-connections: %d of %zu closed by the coordinator within %d s\n", closed,
                fds.size(), seconds);
  } else if (action == "join-unreachable" && args.empty()) {
    Print("join", Join(x, Base(x, "hostile-unreachable"), &me));
  } else {
    std::cerr << kUsage;
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> rest;
  std::string target, token_file, job;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if ((a == "--coordinator" || a == "--token-file" || a == "--job") && i + 1 < argc) {
      (a == "--coordinator" ? target : a == "--job" ? job : token_file) = argv[++i];
    } else {
      rest.push_back(a);
    }
  }
  if (target.empty() || token_file.empty() || job.empty() || rest.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  std::ifstream in(token_file);
  std::stringstream ss;
  ss << in.rdbuf();
  Ctx x;
  x.token = ss.str();
  while (!x.token.empty() && (x.token.back() == '\n' || x.token.back() == '\r')) x.token.pop_back();
  x.job = job;
  if (const size_t colon = target.rfind(':'); colon != std::string::npos) {
    (void)absl::SimpleAtoi(target.substr(colon + 1), &x.port);
  }
  x.stub =
      pb::Coordinator::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  const std::string action = rest[0];
  rest.erase(rest.begin());
  return Run(x, action, rest);
}
