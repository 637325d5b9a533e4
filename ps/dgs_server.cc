// DgsServer: the serving loop of one DGS shard over a Transport
// (ps/dgs_exchange.h; docs/architecture.md "DGS").
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ps/dgs_exchange.h"

namespace gradex::ps {

DgsServer::DgsServer(transport::Transport& transport, DgsJob job, DgsServerShard& shard,
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
  unapplied_.assign(n, 0);
  // A worker without a valid rank is never served (a caller bug, refused
  // here rather than handed to the transport).
  lost_.assign(n, 0);
  ranks_.resize(n, -1);
  for (size_t k = 0; k < n; ++k) {
    if (ranks_[k] < 0 || ranks_[k] >= transport.size()) lost_[k] = 1;
  }
}

absl::Status DgsServer::Post(uint32_t worker) {
  absl::StatusOr<transport::RequestId> r =
      transport_.PostRecvAtMost(ranks_[worker], DgsUpTag(ctx_.shard), cap_);
  if (!r.ok()) return r.status();
  recvs_[worker] = *r;
  return absl::OkStatus();
}

absl::Status DgsServer::Reply(uint32_t worker, transport::Bytes message) {
  stats_.bytes_out += message.size();
  ++stats_.messages_out;
  absl::StatusOr<transport::RequestId> send =
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
  DgsMessage& reply = reply_;
  absl::Status s = shard_.ApplyPush(worker, push, &why);
  if (s.ok()) s = shard_.MakePull(worker, &reply, &why);
  if (!s.ok()) {
    unapplied_[worker] = push.request;
    return Refused(worker, push.request, why);
  }
  reply.request = push.request;
  absl::StatusOr<transport::Bytes> bytes = EncodeDgsReply(ctx_, reply, std::move(spare_));
  if (!bytes.ok()) return bytes.status();
  return Reply(worker, *std::move(bytes));
}

absl::Status DgsServer::Handle(uint32_t worker, transport::Bytes message) {
  ++stats_.messages_in;
  stats_.bytes_in += message.size();
  // Whatever the worker sends next supersedes a push of it still held: it
  // gave up waiting for that one, which is dropped unapplied (and said so
  // in the next full sync, so that the worker puts it back).
  if (held_[worker]) unapplied_[worker] = held_[worker]->request;
  held_[worker].reset();
  DgsMessage& m = in_;
  DgsRefusal why;
  if (!DecodeDgsFromWorker(message, ctx_, worker, &m, &why).ok()) {
    shard_.Count(why);
    // The request number is only echoed, so it is read even from a message
    // refused for another field.
    uint32_t request = 0;
    if (message.size() >= sizeof(DgsMessageHeader)) {
      std::memcpy(&request, message.data() + offsetof(DgsMessageHeader, request), sizeof request);
    }
    if (request != 0) unapplied_[worker] = request;  // a push, perhaps: not applied
    return Refused(worker, request, why);
  }
  spare_ = std::move(message);  // decoded: its room makes the next reply
  if (m.kind == DgsKind::kLeave) {
    shard_.Deactivate(worker);
    ServeHeld();  // the others no longer wait for this worker
    return absl::OkStatus();
  }
  if (m.kind == DgsKind::kHello) {
    if (m.version > shard_.version()) {
      // The worker saw a later version of this shard than the shard has:
      // restored from an older snapshot. Its full sync below replaces the
      // worker's range; the gap is counted for the server to log and export.
      ++stats_.version_gaps;
      stats_.last_gap = m.version - shard_.version();
      stats_.last_gap_worker = worker;
      stats_.last_gap_worker_version = m.version;
    }
    DgsMessage& reply = reply_;
    if (!shard_.Join(worker, m.dense, &reply, &why).ok()) return Refused(worker, m.request, why);
    reply.request = m.request;
    reply.unapplied = std::exchange(unapplied_[worker], 0);
    absl::StatusOr<transport::Bytes> bytes = EncodeDgsReply(ctx_, reply, std::move(spare_));
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
  std::vector<std::pair<uint32_t, transport::RequestId>> still;
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
    transport::Bytes bytes;
    absl::StatusOr<bool> done = transport_.Test(*recvs_[k], &bytes);
    if (done.ok() && !*done) continue;
    recvs_[k].reset();
    handled = true;
    if (!done.ok()) {
      if (absl::Status blamed = transport_.blame(ranks_[k]); !blamed.ok()) {
        // A flood of messages no receive took: the worker is dropped, its
        // messages discarded by the transport; the others go on.
        ++stats_.workers_blamed;
        stats_.last_blame = std::string(blamed.message());
        Lose(k);
        ServeHeld();
        continue;
      }
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
    if (!Handle(k, std::move(bytes)).ok()) Lose(k);
  }
  if (std::all_of(lost_.begin(), lost_.end(), [](uint8_t l) { return l != 0; })) {
    return absl::UnavailableError(absl::StrCat("DGS shard ", ctx_.shard, ": every worker is gone"));
  }
  return handled;
}

absl::Status DgsServer::ServeUntil(transport::Deadline until) {
  // Polls, backing off from 20 us to 1 ms while idle: the transport has no
  // wait-for-any, and a server must not spin a core its workers need.
  auto idle = std::chrono::microseconds(20);
  while (transport::Clock::now() < until) {
    absl::StatusOr<bool> handled = Poll();
    if (!handled.ok()) return handled.status();
    if (*handled) {
      idle = std::chrono::microseconds(20);
      continue;
    }
    std::this_thread::sleep_for(
        std::min<transport::Clock::duration>(idle, until - transport::Clock::now()));
    idle = std::min(idle * 2, std::chrono::microseconds(1000));
  }
  return absl::OkStatus();
}

}  // namespace gradex::ps
