#include "services/client/client_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "member/grpc_control_plane.h"
#include "member/member_wiring.h"
#include "services/client/plan_override.h"

namespace gradex::client {
namespace {

std::atomic<uint64_t> g_clients{0};  // agent ids stay unique across clients of one process

}  // namespace

ClientImpl::ClientImpl(ClientOptions options, device::Backend* device)
    : options_(std::move(options)), device_(device) {
  world_.store(options_.world_size);
}

ClientImpl::~ClientImpl() { (void)Close(); }

absl::Status ClientImpl::Start(const Rendezvous& rendezvous) {
  absl::StatusOr<CoordinatorEndpoint> e = FindCoordinator(options_, rendezvous);
  if (!e.ok()) return e.status();
  endpoint_ = *std::move(e);
  const auto rpc = std::min<std::chrono::milliseconds>(options_.timeout, std::chrono::seconds(5));
  member::MemberWiringOptions wire;
  member::GrpcControlPlaneOptions& g = wire.control;
  g.target = endpoint_.address;
  g.tls_ca = options_.tls_ca;
  g.tls_client_cert = options_.tls_client_cert;
  g.tls_client_key = options_.tls_client_key;
  g.tls_server_name = options_.tls_server_name;
  g.rpc_timeout = rpc;
  // The first join retries an unreachable coordinator (rank 0 may start
  // late) until the client's timeout, counting the attempt in flight.
  g.join_timeout = std::max(options_.timeout - rpc, std::chrono::milliseconds(0));
  wire.data_ip = options_.data_ip;
  transport::ucx::UcxOptions& ucx = wire.ucx;
  ucx.connect_timeout = options_.timeout;
  // No schedule sends more in one message than a bucket in dense frames plus
  // a header per block, twice over (as gradex-agent); the link probe's 1 MiB
  // message sets the floor.
  ucx.max_message_bytes = std::max<size_t>(2 * (options_.max_bucket_elements * 4 + 48 * 4096),
                                           (1u << 20) + (64u << 10));
  absl::StatusOr<member::MemberWiring> wired = member::WireMember(std::move(wire));
  if (!wired.ok()) return wired.status();
  control_ = std::move(wired->control);
  transports_ = std::move(wired->transports);
  metrics_ = std::make_unique<pipeline::AgentMetrics>();
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
  pipeline::AgentOptions a;
  a.job = options_.job;
  a.token = endpoint_.token;
  // The node this rank joins with: ranks that share it share its fabric
  // (the hierarchical exchange's node), GRADEX_NODE where the host name
  // does not tell (containers, emulated nodes).
  a.host = options_.node.empty() ? std::string(host) : options_.node;
  a.local_rank = options_.local_rank;
  a.agent_id = absl::StrCat(host, "/", options_.local_rank, "/", getpid(), "/r", options_.rank, "/",
                            g_clients.fetch_add(1));
  a.join_timeout = options_.timeout;
  a.rpc_timeout = rpc;
  a.sync_timeout = options_.timeout;
  a.rules.start_iter = options_.start_iter;
  a.rules.min_compression_rate = options_.min_compression_rate;
  a.rules.dense_probe_period = options_.dense_probe_period;
  a.rules.refuse_nonfinite = options_.refuse_nonfinite;
  a.rules.hierarchy = options_.hierarchy != "off";
  agent_ = std::make_unique<pipeline::Agent>(a, control_.get(), transports_.get(), metrics_.get());
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
  pipeline::PipelineOptions p;
  p.timeout = options_.timeout;
  p.max_bucket_elements = options_.max_bucket_elements;
  p.mean = options_.mean;
  p.pipeline = options_.pipeline;
  p.momentum = options_.momentum_correction;
  p.factor_masking = options_.factor_masking;
  p.device = device_;
  pipeline_ = std::make_unique<pipeline::BucketPipeline>(
      agent_.get(), p, [this](const pipeline::BucketEnd& end) { Record(end); });
  return absl::OkStatus();
}

void ClientImpl::AllreduceAsync(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                                bool last_in_step, Done done, uintptr_t stream) {
  if (!done) done = [](absl::Status) {};
  if (pipeline_ == nullptr) {
    done(absl::FailedPreconditionError("gradex client is closed"));
    return;
  }
  (void)pipeline_->Submit(
      std::move(spans), data, memory, last_in_step,
      [done = std::move(done)](const pipeline::BucketEnd& end) { done(end.status); }, stream);
}

absl::Status ClientImpl::Flush() {
  if (pipeline_ == nullptr) return absl::OkStatus();
  return pipeline_->Flush();
}

absl::Status ClientImpl::Close() {
  {
    absl::MutexLock lock(&close_mu_);
    if (closed_) return absl::OkStatus();
  }
  if (pipeline_ != nullptr) {
    // From a callback this is FAILED_PRECONDITION and nothing closes.
    if (absl::Status c = pipeline_->Close(); !c.ok()) return c;
  }
  {
    absl::MutexLock lock(&close_mu_);
    if (closed_) return absl::OkStatus();
    closed_ = true;
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
