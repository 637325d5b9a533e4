// A Transport that forwards every call to an inner one: the base of the
// decorators (fault injection, wait tracking), which override only the
// calls they observe or change.
#ifndef GRADEX_TRANSPORT_FORWARDING_TRANSPORT_H_
#define GRADEX_TRANSPORT_FORWARDING_TRANSPORT_H_

#include <memory>
#include <utility>

#include "transport/transport.h"

namespace gradex::transport {

class ForwardingTransport : public Transport {
 public:
  // Borrows `inner`, which must outlive this wrapper.
  explicit ForwardingTransport(Transport& inner) : inner_(&inner) {}
  // Owns `inner` (not null).
  explicit ForwardingTransport(std::unique_ptr<Transport> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  Transport& inner() const { return *inner_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override {
    return inner_->PostSend(peer, tag, std::move(payload));
  }
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override {
    return inner_->PostRecv(peer, tag);
  }
  absl::StatusOr<RequestId> PostRecvAtMost(int peer, uint64_t tag, size_t capacity) override {
    return inner_->PostRecvAtMost(peer, tag, capacity);
  }
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return inner_->Wait(request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return inner_->Test(request, out);
  }
  void CancelAll(Deadline deadline) override { inner_->CancelAll(deadline); }
  void Abort(Deadline deadline) override { inner_->Abort(deadline); }
  bool aborted() const override { return inner_->aborted(); }
  absl::Status blame(int peer) const override { return inner_->blame(peer); }
  PeerCounters counters(int peer) const override { return inner_->counters(peer); }
  void ResetCounters() override { inner_->ResetCounters(); }
  RecvProfile recv_profile() const override { return inner_->recv_profile(); }
  Bytes TakeBuffer(size_t bytes) override { return inner_->TakeBuffer(bytes); }
  void Recycle(Bytes buffer) override { inner_->Recycle(std::move(buffer)); }

 private:
  std::unique_ptr<Transport> owned_;  // null when borrowed
  Transport* const inner_;
};

}  // namespace gradex::transport

#endif  // GRADEX_TRANSPORT_FORWARDING_TRANSPORT_H_
