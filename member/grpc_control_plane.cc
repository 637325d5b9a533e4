// The gRPC control plane's calls (Join, Heartbeat, Leave) and its creation;
// the joins' retries are in grpc_control_plane_join.cc, the background
// threads' streams in grpc_control_plane_streams.cc.
#include "member/grpc_control_plane.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "gradex/v1/coordinator.grpc.pb.h"
#include "member/grpc_control_plane_impl.h"
#include "member/grpc_messages.h"

namespace gradex::member {
namespace {

namespace pb = ::gradex::v1;

}  // namespace

absl::StatusOr<JoinReply> GrpcControlPlane::Join(const JoinRequest& request,
                                                 transport::Deadline deadline) {
  {
    absl::MutexLock lock(&mu_);
    join_ = request;
  }
  absl::StatusOr<JoinReply> r = started_.load() ? DoJoin(deadline) : FirstJoin(deadline);
  if (r.ok() && !started_.exchange(true)) {
    watcher_ = std::thread([this] { Watch(); });
    sender_ = std::thread([this] { Send(); });
  }
  return r;
}

absl::Status GrpcControlPlane::Heartbeat(transport::Deadline deadline) {
  pb::HeartbeatRequest req;
  req.set_member_id(member_id_.load());
  req.set_member_secret(Secret());
  std::shared_ptr<const Plan> p = store_.Latest();
  req.set_epoch(p == nullptr ? 0 : p->epoch);
  req.set_next_step(next_step_.load());
  if (std::shared_ptr<const WaitSource> w = std::atomic_load(&waits_)) FillWait(*w, &req);
  pb::HeartbeatResponse resp;
  grpc::ClientContext ctx;
  Prepare(ctx, deadline);
  return FromGrpc(stub_->Heartbeat(&ctx, req, &resp), "heartbeat");
}

absl::Status GrpcControlPlane::Leave(transport::Deadline deadline) {
  Stop();
  pb::LeaveRequest req;
  req.set_member_id(member_id_.load());
  req.set_member_secret(Secret());
  req.set_reason("agent finished");
  pb::LeaveResponse resp;
  grpc::ClientContext ctx;
  Prepare(ctx, deadline);
  return FromGrpc(stub_->Leave(&ctx, req, &resp), "leave");
}

void GrpcControlPlane::Prepare(grpc::ClientContext& ctx, transport::Deadline deadline) {
  ctx.set_deadline(std::chrono::system_clock::now() + (deadline - transport::Clock::now()));
  absl::MutexLock lock(&mu_);
  ctx.AddMetadata("authorization", "Bearer " + join_.token);
}

std::string GrpcControlPlane::Secret() {
  absl::MutexLock lock(&mu_);
  return secret_;
}

void GrpcControlPlane::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
  }
  reports_.Close();
  if (watcher_.joinable()) watcher_.join();
  if (sender_.joinable()) sender_.join();
}

absl::StatusOr<std::unique_ptr<ControlPlane>> CreateGrpcControlPlane(
    const GrpcControlPlaneOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CoordinatorChannel(options);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ControlPlane>(new GrpcControlPlane(options, *std::move(channel)));
}

}  // namespace gradex::member
