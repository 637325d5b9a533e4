// Test hook: a Transport that forwards to another and SIGKILLs the process
// when it posts a given send of an armed call, so a rank dies at a
// deterministic point inside a call (a timer misses it on a loaded machine).
#ifndef GRADEX_BENCH_FAULT_TRANSPORT_H_
#define GRADEX_BENCH_FAULT_TRANSPORT_H_

#include <csignal>

#include "transport/transport.h"

namespace gradex::bench {

class FaultTransport : public Transport {
 public:
  // Dies when posting send number `sends_before_death` + 1 after Arm().
  FaultTransport(Transport& inner, int sends_before_death)
      : inner_(inner), sends_before_death_(sends_before_death) {}

  void Arm() { armed_ = true; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::StatusOr<RequestId> PostSend(int peer, uint64_t tag, Bytes payload) override {
    if (armed_ && sends_++ >= sends_before_death_) std::raise(SIGKILL);
    return inner_.PostSend(peer, tag, std::move(payload));
  }
  absl::StatusOr<RequestId> PostRecv(int peer, uint64_t tag) override {
    return inner_.PostRecv(peer, tag);
  }
  absl::Status Wait(RequestId request, Deadline deadline, Bytes* out) override {
    return inner_.Wait(request, deadline, out);
  }
  absl::StatusOr<bool> Test(RequestId request, Bytes* out) override {
    return inner_.Test(request, out);
  }
  void CancelAll(Deadline deadline) override { inner_.CancelAll(deadline); }
  void Abort(Deadline deadline) override { inner_.Abort(deadline); }
  bool aborted() const override { return inner_.aborted(); }
  PeerCounters counters(int peer) const override { return inner_.counters(peer); }
  void ResetCounters() override { inner_.ResetCounters(); }

 private:
  Transport& inner_;
  int sends_before_death_;
  bool armed_ = false;
  int sends_ = 0;
};

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_FAULT_TRANSPORT_H_
