#include "bench/transport/p2p.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/stats.h"

namespace gradex::bench {
namespace {

using Seconds = std::chrono::duration<double>;

constexpr uint64_t kDataTag = 1;
constexpr uint64_t kAckTag = 2;

absl::Status CheckPair(const transport::Transport& t) {
  if (t.size() < 2) return absl::InvalidArgumentError("the transport benchmark needs 2 ranks");
  return absl::OkStatus();
}

absl::StatusOr<transport::RequestId> PostReceive(transport::Transport& t, int peer, uint64_t tag,
                                                 const P2pOptions& o) {
  return o.capped ? t.PostRecvAtMost(peer, tag, o.bytes) : t.PostRecv(peer, tag);
}

// Receives one message and checks its size and its first and last bytes,
// which the sender stamps with the message number.
absl::Status Expect(transport::Transport& t, transport::RequestId id, const P2pOptions& o,
                    int number) {
  transport::Bytes in;
  if (absl::Status s = t.Wait(id, o.deadline, &in); !s.ok()) return s;
  if (in.size() != o.bytes) {
    return absl::DataLossError(absl::StrCat("got ", in.size(), " bytes, want ", o.bytes));
  }
  const auto stamp = static_cast<uint8_t>(number);
  if (o.bytes > 0 && (in.front() != stamp || in.back() != stamp)) {
    return absl::DataLossError(absl::StrCat("message ", number, " arrived out of order"));
  }
  t.Recycle(std::move(in));  // as a collective does once it has decoded a message
  return absl::OkStatus();
}

transport::Bytes Message(size_t bytes, int number) {
  transport::Bytes b(bytes, 0x5a);
  if (bytes > 0) b.front() = b.back() = static_cast<uint8_t>(number);
  return b;
}

}  // namespace

absl::StatusOr<P2pResult> MeasureLatency(transport::Transport& t, const P2pOptions& o) {
  if (absl::Status s = CheckPair(t); !s.ok()) return s;
  const bool sender = t.rank() == 0;
  const int peer = sender ? 1 : 0;
  std::vector<double> rtt;
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    const auto start = transport::Clock::now();
    if (sender) {
      absl::StatusOr<transport::RequestId> send = t.PostSend(peer, kDataTag, Message(o.bytes, i));
      if (!send.ok()) return send.status();
      absl::StatusOr<transport::RequestId> recv = PostReceive(t, peer, kDataTag, o);
      if (!recv.ok()) return recv.status();
      if (absl::Status s = Expect(t, *recv, o, i); !s.ok()) return s;
      if (absl::Status s = t.Wait(*send, o.deadline, nullptr); !s.ok()) return s;
    } else {
      absl::StatusOr<transport::RequestId> recv = PostReceive(t, peer, kDataTag, o);
      if (!recv.ok()) return recv.status();
      if (absl::Status s = Expect(t, *recv, o, i); !s.ok()) return s;
      absl::StatusOr<transport::RequestId> send = t.PostSend(peer, kDataTag, Message(o.bytes, i));
      if (!send.ok()) return send.status();
      if (absl::Status s = t.Wait(*send, o.deadline, nullptr); !s.ok()) return s;
    }
    if (i >= o.warmup) rtt.push_back(Seconds(transport::Clock::now() - start).count());
  }
  P2pResult r;
  r.bytes = o.bytes;
  r.one_way_us = Median(rtt) / 2 * 1e6;
  return r;
}

absl::StatusOr<P2pResult> MeasureBandwidth(transport::Transport& t, const P2pOptions& o) {
  if (absl::Status s = CheckPair(t); !s.ok()) return s;
  const bool sender = t.rank() == 0;
  const int peer = sender ? 1 : 0;
  const int total = o.warmup + o.iters;
  const int window = std::max(1, o.window);
  transport::Clock::time_point start = transport::Clock::now();
  std::deque<std::pair<int, transport::RequestId>> inflight;  // (message number, request)
  auto retire_one = [&]() -> absl::Status {
    auto [number, id] = inflight.front();
    inflight.pop_front();
    absl::Status s = sender ? t.Wait(id, o.deadline, nullptr) : Expect(t, id, o, number);
    if (s.ok() && !sender && number == o.warmup - 1) {
      // The timed part starts once the warm-up messages are in.
      start = transport::Clock::now();
      t.ResetCounters();
    }
    return s;
  };
  if (o.warmup == 0 && !sender) t.ResetCounters();
  for (int i = 0; i < total; ++i) {
    if (static_cast<int>(inflight.size()) >= window) {
      if (absl::Status s = retire_one(); !s.ok()) return s;
    }
    absl::StatusOr<transport::RequestId> id = sender
                                                  ? t.PostSend(peer, kDataTag, Message(o.bytes, i))
                                                  : PostReceive(t, peer, kDataTag, o);
    if (!id.ok()) return id.status();
    inflight.emplace_back(i, *id);
  }
  while (!inflight.empty()) {
    if (absl::Status s = retire_one(); !s.ok()) return s;
  }
  P2pResult r;
  r.bytes = o.bytes;
  // The receiver's clock: from the last warm-up message in to the last timed
  // one in; then one byte back so the sender does not leave early.
  if (!sender) {
    r.wall_s = Seconds(transport::Clock::now() - start).count();
    r.profile = t.recv_profile();
    r.bandwidth_mbs = r.wall_s > 0 ? static_cast<double>(o.bytes) * o.iters / r.wall_s / 1e6 : 0;
    absl::StatusOr<transport::RequestId> ack = t.PostSend(peer, kAckTag, transport::Bytes{1});
    if (!ack.ok()) return ack.status();
    if (absl::Status s = t.Wait(*ack, o.deadline, nullptr); !s.ok()) return s;
  } else {
    absl::StatusOr<transport::RequestId> ack = t.PostRecvAtMost(peer, kAckTag, 1);
    if (!ack.ok()) return ack.status();
    transport::Bytes in;
    if (absl::Status s = t.Wait(*ack, o.deadline, &in); !s.ok()) return s;
  }
  return r;
}

std::vector<size_t> SizeLadder(size_t lo, size_t hi) {
  std::vector<size_t> sizes;
  for (size_t s = std::max<size_t>(lo, 1); s < hi; s *= 4) sizes.push_back(s);
  sizes.push_back(hi);
  return sizes;
}

}  // namespace gradex::bench
