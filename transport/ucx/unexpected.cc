// UcxTransport: messages no receive took yet: held off UCX's unexpected
// queue, counted per sender, and a sender over its cap blamed and dropped.
#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "transport/ucx/internal.h"

namespace gradex::transport::ucx {
namespace internal {

// UCX 1.13's largest eager message where this transport sets the threshold
// (UcxOptions::rndv_thresh_bytes' default); larger ones wait as a header.
constexpr size_t kMostHeldBytes = 256 * 1024;

size_t UcxTransport::EarlyBytesCap() const {
  return std::max(options_.unexpected_bytes_per_peer, 4 * options_.max_message_bytes);
}

void UcxTransport::Discard(ucp_tag_message_h msg) {
  auto r = std::make_unique<Request>();
  r->buf.resize(1);
  r->state = State::kInFlight;
  const ucp_request_param_t param = RecvParam(r.get());
  ucs_status_ptr_t p = ucp_tag_msg_recv_nbx(worker_, r->buf.data(), r->buf.size(), msg, &param);
  if (UCS_PTR_IS_PTR(p)) {
    r->ucx = p;
    zombies_.push_back(std::move(r));  // freed once it ends (ReapZombies)
  }
}

void UcxTransport::DrainUnexpected() {
  if (options_.unexpected_bytes_per_peer == 0 && options_.unexpected_messages_per_peer == 0) {
    return;
  }
  const uint64_t this_generation = (uint64_t{generation_} << kGenerationShift) & kGenerationMask;
  // Bounded per call: the caller's own matching goes on between batches.
  for (int i = 0; i < 256; ++i) {
    ucp_tag_recv_info_t info = {};
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, this_generation, kGenerationMask, 1, &info);
    if (msg == nullptr) return;
    const int peer = static_cast<int>((info.sender_tag >> kTagBits) & (kMaxRanks - 1));
    if (peer >= size_ || peer == rank_) {  // a rank this communicator lacks, or forged as ours
      Discard(msg);
      continue;
    }
    if (!peer_status_[peer].ok()) {
      ++counters_[peer].dropped_messages;
      Discard(msg);
      continue;
    }
    // UCX holds an eager message's payload, and only a header for a
    // rendezvous: counted at most at the eager threshold.
    const size_t counted = std::min<size_t>(info.length, kMostHeldBytes);
    EarlyUse& use = early_use_[peer];
    use.messages += 1;
    use.bytes += counted;
    ++counters_[peer].early_messages;
    early_[info.sender_tag].push_back(Early{msg, info, counted});
    const bool over_messages = options_.unexpected_messages_per_peer > 0 &&
                               use.messages > options_.unexpected_messages_per_peer;
    const bool over_bytes = options_.unexpected_bytes_per_peer > 0 && use.bytes > EarlyBytesCap();
    if (over_messages || over_bytes) Blame(peer);
  }
}

void UcxTransport::Blame(int peer) {
  const EarlyUse use = early_use_[peer];
  peer_status_[peer] = absl::ResourceExhaustedError(
      absl::StrCat("rank ", rank_, ": peer ", peer, " sent ", use.messages, " messages (",
                   use.bytes, " bytes) that no receive took, over the cap of ",
                   options_.unexpected_messages_per_peer, " messages or ", EarlyBytesCap(),
                   " bytes per peer (tags no schedule receives?): peer ", peer, " is blamed"));
  // What it sent is discarded: UCX frees it.
  for (auto it = early_.begin(); it != early_.end();) {
    std::deque<Early>& q = it->second;
    for (auto m = q.begin(); m != q.end();) {
      if (static_cast<int>((m->info.sender_tag >> kTagBits) & (kMaxRanks - 1)) != peer) {
        ++m;
        continue;
      }
      ++counters_[peer].dropped_messages;
      Discard(m->msg);
      m = q.erase(m);
    }
    it = q.empty() ? early_.erase(it) : std::next(it);
  }
  early_use_[peer] = EarlyUse{};
}

}  // namespace internal
}  // namespace gradex::transport::ucx
