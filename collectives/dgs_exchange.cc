#include "collectives/dgs_exchange.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace gradex {
namespace {

DgsWireContext WorkerContext(const DgsJob& job, const DgsWorkerState& state, uint32_t shard) {
  DgsWireContext ctx;
  ctx.job_id = job.job_id;
  ctx.epoch = job.epoch;
  ctx.layout = &state.layout();
  ctx.shard = shard;
  ctx.range = state.shard_ranges()[shard];
  // A worker knows its own id only; the decoder checks the reply names it.
  ctx.workers = kDgsMaxWorkers;
  return ctx;
}

// The entries of `all` (sorted) inside `r`.
kernels::SparseView Slice(const kernels::SparseVec& all, DgsRange r) {
  auto lo = std::lower_bound(all.idx.begin(), all.idx.end(), r.begin);
  auto hi = std::lower_bound(lo, all.idx.end(), r.end);
  const size_t at = lo - all.idx.begin();
  return {all.idx.data() + at, all.val.data() + at, static_cast<size_t>(hi - lo)};
}

// A refusal the worker cures by saying hello again and re-pushing: the shard
// restarted from a snapshot (not joined) or re-synced it (stale version).
bool CuredByRejoin(const DgsMessage& m) {
  return m.kind == DgsKind::kRefused &&
         (m.reason == DgsRefusal::kNotJoined || m.reason == DgsRefusal::kStaleVersion);
}

}  // namespace

DgsPushPull::DgsPushPull(Transport& transport, DgsJob job, std::vector<DgsShardPeer> shards)
    : transport_(transport), job_(job), shards_(std::move(shards)), pending_(shards_.size()) {}

absl::StatusOr<DgsMessage> DgsPushPull::AwaitReply(const DgsWorkerState& state, size_t i,
                                                   uint32_t request, Deadline deadline,
                                                   DgsStepStats* stats) {
  const DgsShardPeer& peer = shards_[i];
  const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
  const uint64_t cap = DgsMaxMessageBytes(state.layout(), ctx.range);
  for (;;) {
    if (!pending_[i].recv) {
      absl::StatusOr<RequestId> r =
          transport_.PostRecvAtMost(peer.rank, DgsDownTag(peer.shard), cap);
      if (!r.ok()) return r.status();
      pending_[i].recv = *r;
    }
    Bytes bytes;
    absl::Status s = transport_.Wait(*pending_[i].recv, deadline, &bytes);
    // A receive that timed out stays posted: the late reply lands in it and
    // is dropped by its request number on the next call.
    if (s.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(
          absl::StrCat("DGS worker ", state.worker(), ": no reply from shard ", peer.shard,
                       " (rank ", peer.rank, ") before the deadline: ", s.message()));
    }
    pending_[i].recv.reset();
    if (!s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("DGS worker ", state.worker(), ": shard ", peer.shard, " (rank ",
                                 peer.rank, "): ", s.message()));
    }
    if (stats != nullptr) stats->recv_bytes += bytes.size();
    DgsMessage m;
    DgsRefusal why;
    if (absl::Status d = DecodeDgsFromShard(bytes, ctx, state.worker(), &m, &why); !d.ok()) {
      return absl::Status(d.code(), absl::StrCat("DGS worker ", state.worker(), ": shard ",
                                                 peer.shard, ": ", d.message()));
    }
    if (m.request == request) return m;
    // A reply to a request this worker gave up on: dropped.
  }
}

absl::Status DgsPushPull::Hello(DgsWorkerState& state, size_t i, std::span<float> params,
                                Deadline deadline, DgsStepStats* stats) {
  const DgsShardPeer& peer = shards_[i];
  const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
  const uint32_t request = next_request_++;
  absl::StatusOr<Bytes> hello =
      EncodeDgsHello(ctx, state.worker(), request,
                     std::span<const float>(params).subspan(ctx.range.begin, ctx.range.size()));
  if (!hello.ok()) return hello.status();
  if (stats != nullptr) {
    stats->sent_bytes += hello->size();
    ++stats->hellos;
  }
  absl::StatusOr<RequestId> send =
      transport_.PostSend(peer.rank, DgsUpTag(peer.shard), *std::move(hello));
  if (!send.ok()) return send.status();
  absl::StatusOr<DgsMessage> reply = AwaitReply(state, i, request, deadline, stats);
  if (absl::Status s = transport_.Wait(*send, deadline, nullptr); !s.ok()) return s;
  if (!reply.ok()) return reply.status();
  if (reply->kind == DgsKind::kPull) {
    return absl::DataLossError(
        absl::StrCat("DGS shard ", peer.shard, ": a pull answering a hello"));
  }
  if (absl::Status s = state.ApplyPull(peer.shard, *reply, params); !s.ok()) return s;
  if (stats != nullptr) ++stats->full_syncs;
  return absl::OkStatus();
}

absl::Status DgsPushPull::Join(DgsWorkerState& state, std::span<float> params, Deadline deadline,
                               DgsStepStats* stats) {
  if (shards_.size() != state.shard_ranges().size()) {
    return absl::InvalidArgumentError(absl::StrCat("DGS: ", shards_.size(), " shard peers for ",
                                                   state.shard_ranges().size(), " shards"));
  }
  std::vector<uint8_t> seen(shards_.size(), 0);
  for (const DgsShardPeer& p : shards_) {
    if (p.shard >= seen.size() || seen[p.shard]++ != 0 || p.rank < 0 ||
        p.rank >= transport_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DGS: shard peer ", p.shard, " at rank ", p.rank));
    }
  }
  if (params.size() != state.layout().total()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DGS: ", params.size(), " parameters for a model of ", state.layout().total()));
  }
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (state.joined(shards_[i].shard)) continue;
    if (absl::Status s = Hello(state, i, params, deadline, stats); !s.ok()) {
      state.Leave(shards_[i].shard);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DgsPushPull::Leave(DgsWorkerState& state, Deadline deadline) {
  absl::Status first;
  for (const DgsShardPeer& peer : shards_) {
    if (peer.shard >= state.shard_ranges().size() || !state.joined(peer.shard)) continue;
    state.Leave(peer.shard);
    const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
    absl::StatusOr<RequestId> send = transport_.PostSend(
        peer.rank, DgsUpTag(peer.shard), EncodeDgsLeave(ctx, state.worker(), next_request_++));
    absl::Status s = send.status();
    if (s.ok()) s = transport_.Wait(*send, deadline, nullptr);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status DgsPushPull::Step(DgsWorkerState& state, std::span<const float> grad,
                               std::span<float> params, float lr, Deadline deadline,
                               DgsStepStats* stats) {
  if (absl::Status s = Join(state, params, deadline, stats); !s.ok()) return s;
  DgsPush push;
  if (absl::Status s = state.MakePush(grad, params, lr, &push); !s.ok()) return s;
  if (stats != nullptr) stats->pushed_entries += push.entries.nnz();

  // Every shard's push goes out before any reply is awaited.
  struct Out {
    uint32_t request = 0;
    std::optional<RequestId> send;
    absl::Status status;
  };
  std::vector<Out> out(shards_.size());
  auto send_push = [&](size_t i) -> absl::Status {
    const DgsShardPeer& peer = shards_[i];
    const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
    out[i].request = next_request_++;
    absl::StatusOr<Bytes> bytes =
        EncodeDgsPush(ctx, state.worker(), out[i].request, state.version(peer.shard), push.ratio,
                      Slice(push.entries, ctx.range));
    if (!bytes.ok()) return bytes.status();
    if (stats != nullptr) stats->sent_bytes += bytes->size();
    absl::StatusOr<RequestId> send =
        transport_.PostSend(peer.rank, DgsUpTag(peer.shard), *std::move(bytes));
    if (!send.ok()) return send.status();
    out[i].send = *send;
    return absl::OkStatus();
  };
  for (size_t i = 0; i < shards_.size(); ++i) out[i].status = send_push(i);

  absl::Status first;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const uint32_t shard = shards_[i].shard;
    absl::StatusOr<DgsMessage> reply = out[i].status.ok()
                                           ? AwaitReply(state, i, out[i].request, deadline, stats)
                                           : absl::StatusOr<DgsMessage>(out[i].status);
    if (reply.ok() && CuredByRejoin(*reply)) {
      // The shard lost this worker (restarted, or re-synced it): rejoin and
      // push the same entries again on the new base, so nothing is lost.
      if (out[i].send) (void)transport_.Wait(*out[i].send, deadline, nullptr);
      out[i].send.reset();
      state.Leave(shard);
      absl::Status s = Hello(state, i, params, deadline, stats);
      if (s.ok()) s = send_push(i);
      reply = s.ok() ? AwaitReply(state, i, out[i].request, deadline, stats) : s;
    }
    absl::Status s = reply.status();
    if (s.ok()) {
      s = state.ApplyPull(shard, *reply, params);
      if (s.ok() && stats != nullptr) {
        if (reply->kind == DgsKind::kFullSync) ++stats->full_syncs;
        stats->pulled_entries += reply->sparse.nnz();
      }
    }
    if (s.ok() && out[i].send) s = transport_.Wait(*out[i].send, deadline, nullptr);
    if (!s.ok()) {
      state.Leave(shard);
      if (first.ok()) first = s;
    }
  }
  return first;
}

DgsServer::DgsServer(Transport& transport, DgsJob job, DgsServerShard& shard,
                     std::vector<int> worker_ranks)
    : transport_(transport), job_(job), shard_(shard), ranks_(std::move(worker_ranks)) {
  ctx_.job_id = job.job_id;
  ctx_.epoch = job.epoch;
  ctx_.layout = &shard.layout();
  ctx_.shard = shard.shard();
  ctx_.range = shard.range();
  ctx_.workers = shard.options().workers;
  cap_ = DgsMaxMessageBytes(shard.layout(), shard.range());
  const size_t n = ctx_.workers;
  recvs_.resize(n);
  held_.resize(n);
  // A worker without a valid rank is never served (a caller bug, refused
  // here rather than handed to the transport).
  lost_.assign(n, 0);
  ranks_.resize(n, -1);
  for (size_t k = 0; k < n; ++k) {
    if (ranks_[k] < 0 || ranks_[k] >= transport.size()) lost_[k] = 1;
  }
}

absl::Status DgsServer::Post(uint32_t worker) {
  absl::StatusOr<RequestId> r =
      transport_.PostRecvAtMost(ranks_[worker], DgsUpTag(ctx_.shard), cap_);
  if (!r.ok()) return r.status();
  recvs_[worker] = *r;
  return absl::OkStatus();
}

absl::Status DgsServer::Reply(uint32_t worker, Bytes message) {
  stats_.bytes_out += message.size();
  ++stats_.messages_out;
  absl::StatusOr<RequestId> send =
      transport_.PostSend(ranks_[worker], DgsDownTag(ctx_.shard), std::move(message));
  if (!send.ok()) return send.status();
  sends_.push_back({worker, *send});
  return absl::OkStatus();
}

absl::Status DgsServer::Refused(uint32_t worker, uint32_t request, DgsRefusal why) {
  ++stats_.refused;
  return Reply(worker, EncodeDgsRefused(ctx_, worker, request, shard_.version(), why));
}

absl::Status DgsServer::ApplyAndReply(uint32_t worker, const DgsMessage& push) {
  DgsRefusal why;
  DgsMessage reply;
  absl::Status s = shard_.ApplyPush(worker, push, &why);
  if (s.ok()) s = shard_.MakePull(worker, &reply, &why);
  if (!s.ok()) return Refused(worker, push.request, why);
  reply.request = push.request;
  absl::StatusOr<Bytes> bytes = EncodeDgsReply(ctx_, reply);
  if (!bytes.ok()) return bytes.status();
  return Reply(worker, *std::move(bytes));
}

absl::Status DgsServer::Handle(uint32_t worker, const Bytes& message) {
  ++stats_.messages_in;
  stats_.bytes_in += message.size();
  // Whatever the worker sends next supersedes a push of it still held: it
  // gave up waiting for that one.
  held_[worker].reset();
  DgsMessage m;
  DgsRefusal why;
  if (!DecodeDgsFromWorker(message, ctx_, worker, &m, &why).ok()) {
    shard_.Count(why);
    // The request number is only echoed, so it is read even from a message
    // refused for another field.
    uint32_t request = 0;
    if (message.size() >= sizeof(DgsMessageHeader)) {
      std::memcpy(&request, message.data() + offsetof(DgsMessageHeader, request), sizeof request);
    }
    return Refused(worker, request, why);
  }
  if (m.kind == DgsKind::kLeave) {
    shard_.Deactivate(worker);
    ServeHeld();  // the others no longer wait for this worker
    return absl::OkStatus();
  }
  if (m.kind == DgsKind::kHello) {
    DgsMessage reply;
    if (!shard_.Join(worker, m.dense, &reply, &why).ok()) return Refused(worker, m.request, why);
    reply.request = m.request;
    absl::StatusOr<Bytes> bytes = EncodeDgsReply(ctx_, reply);
    if (!bytes.ok()) return bytes.status();
    absl::Status s = Reply(worker, *std::move(bytes));
    ServeHeld();  // a join may admit a held push (the staircase changed)
    return s;
  }
  if (!shard_.MayApply(worker)) {
    held_[worker] = std::move(m);
    ++stats_.held;
    return absl::OkStatus();
  }
  absl::Status s = ApplyAndReply(worker, m);
  ServeHeld();
  return s;
}

void DgsServer::ServeHeld() {
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t k = 0; k < held_.size(); ++k) {
      if (!held_[k] || !shard_.MayApply(k)) continue;
      DgsMessage m = *std::move(held_[k]);
      held_[k].reset();
      if (!ApplyAndReply(k, m).ok()) Lose(k);
      progress = true;
    }
  }
}

void DgsServer::Lose(uint32_t worker) {
  if (lost_[worker]) return;
  lost_[worker] = 1;
  held_[worker].reset();
  recvs_[worker].reset();
  shard_.Deactivate(worker);
  ++stats_.workers_lost;
}

void DgsServer::ReapSends() {
  std::vector<std::pair<uint32_t, RequestId>> still;
  for (const auto& [worker, id] : sends_) {
    absl::StatusOr<bool> done = transport_.Test(id, nullptr);
    if (!done.ok()) {
      Lose(worker);
    } else if (!*done) {
      still.push_back({worker, id});
    }
  }
  sends_ = std::move(still);
}

absl::StatusOr<bool> DgsServer::Poll() {
  ReapSends();
  bool handled = false;
  for (uint32_t k = 0; k < ranks_.size(); ++k) {
    if (lost_[k]) continue;
    if (!recvs_[k] && !Post(k).ok()) {
      Lose(k);
      continue;
    }
    Bytes bytes;
    absl::StatusOr<bool> done = transport_.Test(*recvs_[k], &bytes);
    if (done.ok() && !*done) continue;
    recvs_[k].reset();
    handled = true;
    if (!done.ok()) {
      if (done.status().code() == absl::StatusCode::kResourceExhausted) {
        // Longer than any message of this shard can be: refused unread.
        shard_.Count(DgsRefusal::kOverCapacity);
        ++stats_.messages_in;
        if (!Refused(k, 0, DgsRefusal::kOverCapacity).ok()) Lose(k);
        continue;
      }
      Lose(k);  // the worker is gone; the others go on
      ServeHeld();
      continue;
    }
    if (!Handle(k, bytes).ok()) Lose(k);
  }
  if (std::all_of(lost_.begin(), lost_.end(), [](uint8_t l) { return l != 0; })) {
    return absl::UnavailableError(absl::StrCat("DGS shard ", ctx_.shard, ": every worker is gone"));
  }
  return handled;
}

absl::Status DgsServer::ServeUntil(Deadline until) {
  // Polls, backing off from 20 us to 1 ms while idle: the transport has no
  // wait-for-any, and a server must not spin a core its workers need.
  auto idle = std::chrono::microseconds(20);
  while (Clock::now() < until) {
    absl::StatusOr<bool> handled = Poll();
    if (!handled.ok()) return handled.status();
    if (*handled) {
      idle = std::chrono::microseconds(20);
      continue;
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(idle, until - Clock::now()));
    idle = std::min(idle * 2, std::chrono::microseconds(1000));
  }
  return absl::OkStatus();
}

}  // namespace gradex
