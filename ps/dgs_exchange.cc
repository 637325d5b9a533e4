// DgsPushPull: the worker side of DGS over a Transport (ps/dgs_exchange.h;
// docs/architecture.md "DGS"). DgsServer is in dgs_server.cc.
#include "ps/dgs_exchange.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace gradex::ps {
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

DgsPushPull::DgsPushPull(transport::Transport& transport, DgsJob job,
                         std::vector<DgsShardPeer> shards)
    : transport_(transport), job_(job), shards_(std::move(shards)), pending_(shards_.size()) {}

absl::Status DgsPushPull::AwaitReply(const DgsWorkerState& state, size_t i, uint32_t request,
                                     transport::Deadline deadline, DgsStepStats* stats,
                                     DgsMessage* out) {
  const DgsShardPeer& peer = shards_[i];
  const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
  const uint64_t cap = DgsMaxMessageBytes(state.layout(), ctx.range);
  // `alone`: no earlier request's reply can still come (replies come in the
  // order of the requests), so an unnumbered refusal answers this one.
  // Until a reply matches, this request's may be outstanding.
  const bool alone = !std::exchange(pending_[i].doubt, true);
  for (;;) {
    if (!pending_[i].recv) {
      absl::StatusOr<transport::RequestId> r =
          transport_.PostRecvAtMost(peer.rank, DgsDownTag(peer.shard), cap);
      if (!r.ok()) return r.status();
      pending_[i].recv = *r;
    }
    transport::Bytes bytes;
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
    DgsRefusal why;
    if (absl::Status d = DecodeDgsFromShard(bytes, ctx, state.worker(), out, &why); !d.ok()) {
      return absl::Status(d.code(), absl::StrCat("DGS worker ", state.worker(), ": shard ",
                                                 peer.shard, ": ", d.message()));
    }
    spare_ = std::move(bytes);  // decoded: its room makes the next push
    // A refusal of a message the shard could not read (longer than any of
    // the range's, or shorter than a header) carries request 0 (requests
    // start at 1): it is this request's when nothing earlier is pending.
    if (out->request == 0 && out->kind == DgsKind::kRefused && alone) out->request = request;
    if (out->request == request) {
      pending_[i].doubt = false;
      return absl::OkStatus();
    }
    // A reply to a request this worker gave up on: dropped.
  }
}

absl::Status DgsPushPull::Hello(DgsWorkerState& state, size_t i, std::span<float> params,
                                transport::Deadline deadline, DgsStepStats* stats) {
  const DgsShardPeer& peer = shards_[i];
  const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
  const uint32_t request = NextRequest();
  const uint64_t last_version = state.version(peer.shard);
  absl::StatusOr<transport::Bytes> hello = EncodeDgsHello(
      ctx, state.worker(), request,
      std::span<const float>(params).subspan(ctx.range.begin, ctx.range.size()), last_version);
  if (!hello.ok()) return hello.status();
  if (stats != nullptr) {
    stats->sent_bytes += hello->size();
    ++stats->hellos;
  }
  absl::StatusOr<transport::RequestId> send =
      transport_.PostSend(peer.rank, DgsUpTag(peer.shard), *std::move(hello));
  if (!send.ok()) return send.status();
  DgsMessage& reply = reply_;
  absl::Status got = AwaitReply(state, i, request, deadline, stats, &reply);
  if (absl::Status s = transport_.Wait(*send, deadline, nullptr); !s.ok()) return s;
  if (!got.ok()) return got;
  if (reply.kind == DgsKind::kPull || reply.kind == DgsKind::kDensePull) {
    return absl::DataLossError(
        absl::StrCat("DGS shard ", peer.shard, ": a pull answering a hello"));
  }
  if (absl::Status s = state.ApplyPull(peer.shard, reply, params); !s.ok()) return s;
  if (reply.version < last_version && stats != nullptr) {
    // The shard went back (restored from an older snapshot): the full sync
    // replaced this worker's range with the shard's M all the same.
    ++stats->version_gaps;
    stats->versions_lost += last_version - reply.version;
  }
  // The push this worker gave up on (push_: no MakePush since): the shard
  // says whether it applied it; if not, it goes back into the velocity.
  const uint32_t unknown = std::exchange(pending_[i].unknown_push, 0);
  if (unknown != 0 && reply.unapplied == unknown) state.Unsend(peer.shard, push_);
  if (stats != nullptr) ++stats->full_syncs;
  return absl::OkStatus();
}

absl::Status DgsPushPull::Join(DgsWorkerState& state, std::span<float> params,
                               transport::Deadline deadline, DgsStepStats* stats) {
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

absl::Status DgsPushPull::Leave(DgsWorkerState& state, transport::Deadline deadline) {
  absl::Status first;
  for (const DgsShardPeer& peer : shards_) {
    if (peer.shard >= state.shard_ranges().size() || !state.joined(peer.shard)) continue;
    state.Leave(peer.shard);
    const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
    absl::StatusOr<transport::RequestId> send = transport_.PostSend(
        peer.rank, DgsUpTag(peer.shard), EncodeDgsLeave(ctx, state.worker(), NextRequest()));
    absl::Status s = send.status();
    if (s.ok()) s = transport_.Wait(*send, deadline, nullptr);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

absl::Status DgsPushPull::Step(DgsWorkerState& state, std::span<const float> grad,
                               std::span<float> params, float lr, transport::Deadline deadline,
                               DgsStepStats* stats) {
  if (absl::Status s = Join(state, params, deadline, stats); !s.ok()) return s;
  DgsPush& push = push_;  // kept between steps: a dense push is the whole model
  if (absl::Status s = state.MakePush(grad, params, lr, &push); !s.ok()) return s;
  if (stats != nullptr) stats->pushed_entries += push.nnz;

  // Every shard's push goes out before any reply is awaited.
  struct Out {
    uint32_t request = 0;
    std::optional<transport::RequestId> send;
    absl::Status status;
  };
  std::vector<Out> out(shards_.size());
  auto send_push = [&](size_t i) -> absl::Status {
    const DgsShardPeer& peer = shards_[i];
    const DgsWireContext ctx = WorkerContext(job_, state, peer.shard);
    out[i].request = NextRequest();
    absl::StatusOr<transport::Bytes> bytes =
        push.is_dense
            ? EncodeDgsDensePush(
                  ctx, state.worker(), out[i].request, state.version(peer.shard),
                  std::span<const float>(push.dense).subspan(ctx.range.begin, ctx.range.size()),
                  std::move(spare_))
            : EncodeDgsPush(ctx, state.worker(), out[i].request, state.version(peer.shard),
                            push.ratio, Slice(push.entries, ctx.range));
    if (!bytes.ok()) return bytes.status();
    if (stats != nullptr) stats->sent_bytes += bytes->size();
    absl::StatusOr<transport::RequestId> send =
        transport_.PostSend(peer.rank, DgsUpTag(peer.shard), *std::move(bytes));
    if (!send.ok()) return send.status();
    out[i].send = *send;
    return absl::OkStatus();
  };
  for (size_t i = 0; i < shards_.size(); ++i) out[i].status = send_push(i);

  absl::Status first;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const uint32_t shard = shards_[i].shard;
    // Whether the shard applied this push: known not (never sent, refused),
    // known yes (it answered with a pull or a full sync), or unknown (no
    // reply, or one that could not be read).
    bool unapplied = !out[i].status.ok();
    DgsMessage& reply = reply_;  // its room reused (a dense pull is the whole range)
    absl::Status got = out[i].status.ok()
                           ? AwaitReply(state, i, out[i].request, deadline, stats, &reply)
                           : out[i].status;
    if (got.ok() && CuredByRejoin(reply)) {
      // The shard lost this worker (restarted, or re-synced it): rejoin and
      // push the same entries again on the new base, so nothing is lost.
      if (out[i].send) (void)transport_.Wait(*out[i].send, deadline, nullptr);
      out[i].send.reset();
      state.Leave(shard);
      absl::Status s = Hello(state, i, params, deadline, stats);
      if (s.ok()) s = send_push(i);
      unapplied = !s.ok();
      got = s.ok() ? AwaitReply(state, i, out[i].request, deadline, stats, &reply) : s;
    }
    if (got.ok() && reply.kind == DgsKind::kRefused) unapplied = true;
    absl::Status s = got;
    if (s.ok()) {
      uint64_t entries = 0;
      s = state.ApplyPull(shard, reply, params, &entries);
      if (s.ok() && stats != nullptr) {
        if (reply.kind == DgsKind::kFullSync) ++stats->full_syncs;
        stats->pulled_entries += entries;
      }
    }
    if (s.ok() && out[i].send) s = transport_.Wait(*out[i].send, deadline, nullptr);
    if (!s.ok()) {
      state.Leave(shard);
      // A push the shard did not apply goes back into the velocity, exactly
      // (DgsWorkerState::Unsend; as ResidualLedger::Restore does for the
      // collectives): the next step carries it again. One whose fate is
      // unknown is not put back, lest it count twice: the rejoin's full
      // sync hands out the shard's M, whichever way it went.
      std::string what;
      if (unapplied) {
        const uint64_t n = state.Unsend(shard, push);
        what = absl::StrCat("; the push was not applied: its ", n,
                            " entries are back in the worker's velocity for the next step");
      } else if (!got.ok()) {
        pending_[i].unknown_push = out[i].request;
        what = absl::StrCat("; whether shard ", shard,
                            " applied the push is unknown: the next step rejoins, and puts it back "
                            "if the shard says it did not");
      }
      if (!what.empty()) s = absl::Status(s.code(), absl::StrCat(s.message(), what));
      if (first.ok()) first = s;
    }
  }
  return first;
}

}  // namespace gradex::ps
