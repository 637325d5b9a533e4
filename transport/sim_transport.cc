// The simulated transport is the loopback fabric plus SimClocks, a delivery
// policy that keeps each rank's virtual clock under the α-β(-γ) model of
// sim_transport.h. Matching, deaths and counters are the fabric's.
#include "transport/sim_transport.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "transport/loopback_fabric.h"

namespace gradex::transport {
namespace {

// Called under the fabric's lock (DeliveryPolicy), which also guards Now and
// Reset through LoopbackFabric::WithPolicy.
class SimClocks final : public DeliveryPolicy {
 public:
  SimClocks(int size, const SimParams& params) : params_(params), ranks_(size) {}

  // Starts when the sender's outgoing link is free, occupies it for α + β·m;
  // a message to oneself is free and arrives at the sender's now.
  double Posted(int self, int peer, size_t bytes) override {
    RankClock& me = ranks_[self];
    if (peer == self) return me.now;
    const double start = std::max(me.now, me.link_free);
    me.link_free = start + params_.alpha_s + params_.beta_s_per_byte * bytes;
    return me.link_free;
  }
  void SendCompleted(int self, double stamp) override {
    ranks_[self].now = std::max(ranks_[self].now, stamp);
  }
  // γ per received 4-byte word stands for reducing what arrived.
  void Received(int self, double stamp, size_t bytes) override {
    RankClock& me = ranks_[self];
    me.now = std::max(me.now, stamp) + params_.gamma_s_per_word * (bytes / 4);
  }

  double Now(int self) const { return ranks_[self].now; }
  void Reset(int self, double now) {
    ranks_[self].now = now;
    ranks_[self].link_free = now;
  }

 private:
  struct RankClock {
    double now = 0;        // the rank's virtual clock
    double link_free = 0;  // when its outgoing link has sent everything posted
  };
  const SimParams params_;
  std::vector<RankClock> ranks_;
};

// Runs fn on t's clocks; false when t is not a sim rank.
template <typename Fn>
bool WithClocks(const Transport& t, Fn fn) {
  LoopbackFabric* fabric = FabricOf(t);
  if (fabric == nullptr) return false;
  bool sim = false;
  fabric->WithPolicy([&](DeliveryPolicy& policy) {
    if (auto* clocks = dynamic_cast<SimClocks*>(&policy)) {
      fn(*clocks);
      sim = true;
    }
  });
  return sim;
}

}  // namespace

std::vector<std::unique_ptr<Transport>> CreateSimTransports(int size, const SimParams& params) {
  if (size <= 0) return {};
  return CreateFabricTransports(size, std::make_unique<SimClocks>(size, params));
}

double SimNow(const Transport& t) {
  double now = -1;
  WithClocks(t, [&](SimClocks& c) { now = c.Now(t.rank()); });
  return now;
}

bool SimResetClock(Transport& t, double now) {
  return WithClocks(t, [&](SimClocks& c) { c.Reset(t.rank(), now); });
}

void KillSimRank(Transport& any_rank_of_world, int rank) {
  if (WithClocks(any_rank_of_world, [](SimClocks&) {})) FabricOf(any_rank_of_world)->Kill(rank);
}

}  // namespace gradex::transport
