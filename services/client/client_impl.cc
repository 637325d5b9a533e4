#include "services/client/client_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "services/agent/data_interface.h"
#include "services/agent/grpc_control_plane.h"
#include "services/client/plan_override.h"

namespace gradex::client {
namespace {

std::atomic<uint64_t> g_clients{0};  // agent ids stay unique across clients of one process

}  // namespace

ClientImpl::ClientImpl(ClientOptions options) : options_(std::move(options)) {
  world_.store(options_.world_size);
}

ClientImpl::~ClientImpl() { (void)Close(); }

absl::Status ClientImpl::Start(const Rendezvous& rendezvous) {
  absl::StatusOr<CoordinatorEndpoint> e = FindCoordinator(options_, rendezvous);
  if (!e.ok()) return e.status();
  endpoint_ = *std::move(e);
  const auto rpc = std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(5));
  agent::GrpcControlPlaneOptions g;
  g.target = endpoint_.address;
  g.tls_ca = options_.tls_ca;
  g.tls_client_cert = options_.tls_client_cert;
  g.tls_client_key = options_.tls_client_key;
  g.tls_server_name = options_.tls_server_name;
  g.rpc_timeout = rpc;
  // The first join retries an unreachable coordinator (rank 0 may start
  // late) until the client's timeout, counting the attempt in flight.
  g.join_timeout = std::max(options_.timeout - rpc, std::chrono::milliseconds(0));
  absl::StatusOr<std::unique_ptr<agent::ControlPlane>> control = agent::CreateGrpcControlPlane(g);
  if (!control.ok()) return control.status();
  control_ = *std::move(control);
  UcxOptions ucx;
  absl::StatusOr<std::string> ip = agent::DataPlaneIp(options_.data_ip, endpoint_.address);
  if (!ip.ok()) return ip.status();
  ucx.listen_ip = *ip;
  ucx.connect_timeout = options_.timeout;
  // No schedule sends more in one message than a bucket in dense frames plus
  // a header per block, twice over (as gradex-agent); the link probe's 1 MiB
  // message sets the floor.
  ucx.max_message_bytes = std::max<size_t>(2 * (options_.max_bucket_elements * 4 + 48 * 4096),
                                           (1u << 20) + (64u << 10));
  absl::StatusOr<std::unique_ptr<agent::TransportProvider>> t = agent::CreateUcxProvider(ucx);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat("UCX: ", t.status().message()));
  transports_ = *std::move(t);
  metrics_ = std::make_unique<agent::AgentMetrics>();
  client_metrics_ = std::make_unique<ClientMetrics>(*metrics_->registry());
  if (const int port = MetricsPortOf(options_); port >= 0) {
    // One port per local rank (base + LOCAL_RANK): a pod's ranks each serve their own.
    if (absl::Status s = metrics_->Serve(absl::StrCat(options_.metrics_address, ":", port));
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("GRADEX_METRICS_PORT ", options_.metrics_port, " + LOCAL_RANK ",
                                 options_.local_rank, ": ", s.message()));
    }
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  agent::AgentOptions a;
  a.job = options_.job;
  a.token = endpoint_.token;
  a.host = host;
  a.local_rank = options_.local_rank;
  a.agent_id = absl::StrCat(host, "/", options_.local_rank, "/", getpid(), "/r", options_.rank, "/",
                            g_clients.fetch_add(1));
  a.join_timeout = options_.timeout;
  a.rpc_timeout = rpc;
  a.sync_timeout = options_.timeout;
  a.rules.start_iter = options_.start_iter;
  a.rules.min_compression_rate = options_.min_compression_rate;
  a.rules.dense_probe_period = options_.dense_probe_period;
  agent_ = std::make_unique<agent::Agent>(a, control_.get(), transports_.get(), metrics_.get());
  if (absl::Status s = agent_->Start(); !s.ok()) {
    agent_.reset();  // never joined: nothing to leave
    return absl::Status(s.code(), absl::StrCat("gradex: joining the coordinator at ",
                                               endpoint_.address, ": ", s.message()));
  }
  // What this rank asked for against the plan it joined (no silent override).
  if (absl::Status s = CheckPlanOverrides(options_, control_->JoinedPlanConfig(), endpoint_.address,
                                          *metrics_->registry());
      !s.ok()) {
    (void)agent_->Leave();
    agent_.reset();
    return s;
  }
  if (!options_.timeline_path.empty()) {
    absl::StatusOr<std::unique_ptr<Timeline>> tl = Timeline::Open(
        Timeline::PathFor(options_.timeline_path, options_.rank, options_.world_size),
        options_.rank);
    if (!tl.ok()) return tl.status();
    timeline_ = *std::move(tl);
  }
  started_ = true;
  worker_ = std::thread([this] { ExchangeLoop(); });
  selector_ = std::thread([this] { SelectLoop(); });
  return absl::OkStatus();
}

void ClientImpl::AllreduceAsync(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                                bool last_in_step, Done done) {
  if (!done) done = [](absl::Status) {};
  {
    absl::MutexLock lock(&mu_);
    if (!closing_ && started_) {
      queue_.push_back({std::move(spans), data, memory, last_in_step, std::move(done),
                        std::chrono::system_clock::now()});
      return;
    }
  }
  done(absl::FailedPreconditionError("gradex client is closed"));
}

absl::Status ClientImpl::Flush() {
  if (std::this_thread::get_id() == worker_.get_id() ||
      std::this_thread::get_id() == selector_.get_id()) {
    return absl::FailedPreconditionError(
        "gradex Flush from a bucket's done callback would wait for itself");
  }
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && running_ == 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&idle), absl::FromChrono(options_.timeout))) {
    return absl::DeadlineExceededError(absl::StrCat("gradex Flush: ", queue_.size() + running_,
                                                    " buckets still pending after ",
                                                    options_.timeout.count(), " ms"));
  }
  return absl::OkStatus();
}

void ClientImpl::KeepUnrun(Item& item) {
  size_t n = 0;
  for (const ParamSpan& s : item.spans) n += s.elements;
  if (n != item.data.size() || n == 0 || n > options_.max_bucket_elements) return;
  std::span<const float> grad = item.data;
  if (item.memory == Memory::kDevice) {
    absl::StatusOr<std::span<float>> host = staging_[0].ToHost(item.data);
    if (!host.ok()) return;
    grad = *host;
  }
  absl::StatusOr<agent::BucketSlot*> slot = residuals_.Gather(item.spans);
  if (!slot.ok()) return;
  for (size_t i = 0; i < n; ++i) (*slot)->residual[i] += grad[i];
}

absl::Status ClientImpl::Close() {
  if (std::this_thread::get_id() == worker_.get_id() ||
      std::this_thread::get_id() == selector_.get_id()) {
    return absl::FailedPreconditionError(
        "gradex Close from a bucket's done callback (the progress thread); close from the "
        "trainer's thread");
  }
  std::deque<Item> left;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::OkStatus();
    closed_ = closing_ = true;
    left.swap(queue_);
  }
  // The bucket being selected is handed over, the bucket exchanging ends
  // first; a selected bucket not yet exchanging is given up (kept in its
  // residual, CANCELLED) by the progress thread.
  if (selector_.joinable()) selector_.join();
  if (worker_.joinable()) worker_.join();
  {
    absl::MutexLock lock(&state_mu_);
    for (Item& item : left) KeepUnrun(item);
    if (agent_ != nullptr && agent_->step_open()) (void)agent_->EndStep(nullptr);
  }
  for (Item& item : left) {
    item.done(absl::CancelledError(
        "gradex client closed before the bucket was exchanged (kept in its residual)"));
  }
  absl::Status s;
  if (agent_ != nullptr) s = agent_->Leave();
  if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsNotFound(s)) {
    // The coordinator is gone (rank 0 closed first) or has already dropped
    // this member: its lease ends anyway, and leaving is done.
    std::fprintf(stderr, "gradex: close: leave not confirmed (%s)\n",
                 std::string(s.message()).c_str());
    s = absl::OkStatus();
  }
  if (timeline_ != nullptr) timeline_->Close();
  if (endpoint_.server != nullptr) {
    // The other ranks usually close at about the same time: let them leave
    // (their last reports and Leave land) before the coordinator goes, for
    // at most the timeout or 5 s (a rank that died stays until its lease ends).
    const auto until =
        std::chrono::steady_clock::now() +
        std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(5));
    while (endpoint_.server->coordinator().members() > 0 &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (size_t left = endpoint_.server->coordinator().members(); left > 0) {
      std::fprintf(stderr, "gradex: close: the embedded coordinator stops with %zu members\n",
                   left);
    }
    endpoint_.server->Shutdown();
  }
  return s;
}

}  // namespace gradex::client
