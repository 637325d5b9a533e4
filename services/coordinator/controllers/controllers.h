// The plan's parameter controllers, fed by step reports. Pure logic: no
// locks, no clock of their own (the Coordinator serialises calls).
#ifndef GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CONTROLLERS_H_
#define GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CONTROLLERS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "catalog/models.h"

namespace gradex::coordinator::controllers {

// Team count for an epoch of P members: the configured T when it divides P,
// else the largest divisor of P below it. The algorithm name switches between
// spardl-rsag and spardl-bsag when prefer_rsag (R-SAG needs a power of two).
struct TeamChoice {
  int teams = 1;
  std::string algorithm;
};
TeamChoice ChooseTeams(const std::string& algorithm, int configured_teams, int world,
                       bool prefer_rsag);

// The catalog's models (catalog/models.h), shared with the data plane: the
// keep count of block `pos` of q, and B-SAG's k' step controller.
using catalog::BlockKeep;
using catalog::KPrimeController;

// One KPrimeController per (bucket, team position). Every holder of a block
// reports the same u, so each step feeds a position once; feedback from a k'
// other than the current one (reports lag the plan) is ignored, so the loop
// reacts only to its own last decision.
class KPrimeTable {
 public:
  // Returns true when some k' changed.
  bool Feed(uint32_t bucket, uint64_t elements, int team_position, uint64_t kprime_used,
            uint64_t post_gather_count, uint64_t step, int world, int teams, double density);
  // (bucket, team position) -> k', ordered.
  std::vector<std::pair<std::pair<uint32_t, int>, uint64_t>> Values() const;
  void Reset() { table_.clear(); }

 private:
  struct Entry {
    KPrimeController controller;
    uint64_t elements;
    uint64_t last_step;
    bool fed;  // last_step is meaningful
  };
  std::map<std::pair<uint32_t, int>, Entry> table_;
};

// Ok-Topk region consensus: the P-1 inner boundaries each rank proposed at a
// step, averaged (rounded down, like the data plane's MeanBoundaryAgreement)
// once all P ranks' proposals for that (bucket, step) arrived.
struct AgreedRegions {
  uint32_t bucket;
  uint64_t elements;
  uint64_t from_step;
  std::vector<uint32_t> boundaries;  // P+1 values, 0 .. elements
};
class BoundaryConsensus {
 public:
  explicit BoundaryConsensus(int world) : world_(world) {}
  // A proposal of the wrong length for this epoch's P is ignored (false).
  bool Feed(int rank, uint32_t bucket, uint64_t elements, uint64_t step,
            const std::vector<uint32_t>& inner, std::optional<AgreedRegions>* done);

 private:
  struct Pending {
    uint64_t elements;
    std::vector<uint64_t> sums;
    std::vector<bool> seen;
    int count = 0;
  };
  int world_;
  std::map<std::pair<uint32_t, uint64_t>, Pending> pending_;  // (bucket, step)
};

}  // namespace gradex::coordinator::controllers

#endif  // GRADEX_SERVICES_COORDINATOR_CONTROLLERS_CONTROLLERS_H_
