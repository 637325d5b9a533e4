// Test hook: a Transport that forwards to another and SIGKILLs the process
// when it posts a given send of an armed call, so a rank dies at a
// deterministic point inside a call (a timer misses it on a loaded machine).
#ifndef GRADEX_BENCH_FAULT_TRANSPORT_H_
#define GRADEX_BENCH_FAULT_TRANSPORT_H_

#include <csignal>
#include <utility>

#include "transport/forwarding_transport.h"

namespace gradex::bench {

class FaultTransport : public transport::ForwardingTransport {
 public:
  // Dies when posting send number `sends_before_death` + 1 after Arm().
  FaultTransport(transport::Transport& inner, int sends_before_death)
      : transport::ForwardingTransport(inner), sends_before_death_(sends_before_death) {}

  void Arm() { armed_ = true; }

  absl::StatusOr<transport::RequestId> PostSend(int peer, uint64_t tag,
                                                transport::Bytes payload) override {
    if (armed_ && sends_++ >= sends_before_death_) std::raise(SIGKILL);
    return transport::ForwardingTransport::PostSend(peer, tag, std::move(payload));
  }

 private:
  int sends_before_death_;
  bool armed_ = false;
  int sends_ = 0;
};

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_FAULT_TRANSPORT_H_
