#include "agent/faults/tag_flood_fault.h"

#include <utility>
#include <vector>

#include "transport/forwarding_transport.h"

namespace gradex::agent::faults {
namespace {

// The member floor's provider interface these wrap.
using member::ConnectHooks;
using member::ForwardingProvider;
using member::Plan;

constexpr size_t kFloodMessageBytes = 64 * 1024;  // eager: the receiver's UCX holds it whole
// A phase byte no schedule uses (collectives/tag_space.h numbers them from 1).
constexpr uint64_t kFloodPhase = 0xEE;

class FloodingTransport final : public transport::ForwardingTransport {
 public:
  FloodingTransport(std::unique_ptr<transport::Transport> inner, size_t bytes_per_peer)
      : transport::ForwardingTransport(std::move(inner)),
        left_(size(), bytes_per_peer / kFloodMessageBytes) {}
  absl::StatusOr<transport::RequestId> PostSend(int peer, uint64_t tag,
                                                transport::Bytes payload) override {
    absl::StatusOr<transport::RequestId> id =
        transport::ForwardingTransport::PostSend(peer, tag, std::move(payload));
    // 16 flood messages per real one, each released once sent.
    for (int i = 0; i < 16 && peer != rank() && left_[peer] > 0; ++i, --left_[peer]) {
      absl::StatusOr<transport::RequestId> f =
          inner().PostSend(peer, (kFloodPhase << 40) | (sequence_++ & 0xffffffffffu),
                           transport::Bytes(kFloodMessageBytes, 7));
      if (f.ok()) pending_.push_back(*f);
    }
    Reap();
    return id;
  }

 private:
  void Reap() {
    std::vector<transport::RequestId> still;
    for (transport::RequestId f : pending_) {
      absl::StatusOr<bool> done = inner().Test(f, nullptr);
      if (done.ok() && !*done) still.push_back(f);
    }
    pending_ = std::move(still);
  }
  std::vector<size_t> left_;  // flood messages still to send, per peer
  std::vector<transport::RequestId> pending_;
  uint64_t sequence_ = 0;
};

class FloodingProvider final : public ForwardingProvider {
 public:
  FloodingProvider(std::unique_ptr<member::TransportProvider> inner, size_t bytes_per_peer)
      : ForwardingProvider(std::move(inner)), bytes_(bytes_per_peer) {}
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const Plan& plan, int rank, const ConnectHooks& hooks) override {
    absl::StatusOr<std::unique_ptr<transport::Transport>> t = inner().Connect(plan, rank, hooks);
    if (!t.ok()) return t;
    return std::unique_ptr<transport::Transport>(new FloodingTransport(*std::move(t), bytes_));
  }

 private:
  const size_t bytes_;
};

}  // namespace

std::unique_ptr<member::TransportProvider> TagFloodFault(
    std::unique_ptr<member::TransportProvider> inner, size_t mib_per_peer) {
  return std::make_unique<FloodingProvider>(std::move(inner), mib_per_peer << 20);
}

}  // namespace gradex::agent::faults
