// The automatic SparDL team count (JobConfig.auto_teams): the α-β cost of
// every divisor T of P from SparDL's Table 1 rows, fed by the links the
// agents measure at each epoch's start (StepReport.link). Pure logic: no
// locks, no clock (the Coordinator serialises calls).
#ifndef GRADEX_SERVICES_COORDINATOR_CONTROLLERS_TEAM_CHOICE_H_
#define GRADEX_SERVICES_COORDINATOR_CONTROLLERS_TEAM_CHOICE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "services/coordinator/controllers/controllers.h"

namespace gradex::coordinator::controllers {

// Seconds of one SAG call on P ranks, n elements at `density`, T teams, by
// the algorithm's Table 1 row in the catalog (catalog/cost_rows.h); for B-SAG at
// k' = kprime_ratio · k_block (<= 0: the controller's start, 1/T). HUGE_VAL
// for an algorithm without a row.
double SagSeconds(const std::string& algorithm, int world, uint64_t elements, double density,
                  int teams, double kprime_ratio, double alpha, double beta);

struct TeamCandidate {
  int teams = 1;
  std::string algorithm;
  double seconds = 0;
};

// Every divisor T of P with its algorithm (R-SAG when T is a power of two,
// as docs/design.md prefers, else B-SAG, the only one that runs there) and cost,
// T ascending. kprime_ratio <= 0: B-SAG's controller start, 1/T.
std::vector<TeamCandidate> TeamCandidates(int world, uint64_t elements, double density,
                                          double kprime_ratio, double alpha, double beta);

struct TeamDecision {
  TeamChoice choice;           // what to run (the current one when kept)
  double current_seconds = 0;  // predicted cost of the current choice
  double best_seconds = 0;     // predicted cost of the cheapest candidate
  bool changed = false;
};

// The cheapest candidate, ties to the power of two then to fewer teams;
// the current choice is kept unless the cheapest is more than `min_gain`
// cheaper (hysteresis: a noisy estimate must not flip T at every epoch).
TeamDecision DecideTeams(const TeamChoice& current, int world, uint64_t elements, double density,
                         double kprime_ratio, double alpha, double beta, double min_gain = 0.10);

// Collects one epoch's link estimates and bucket statistics and decides once
// when every rank's estimate is in. α and β are the MAXIMA over ranks: a
// synchronous step waits for its slowest link (every SAG phase is a
// neighbour exchange all ranks finish together), so the slowest rank's link
// is the one the step pays for; a median would hide one slow NIC.
class AutoTeams {
 public:
  void Reset(int world);
  void FeedLink(int rank, double alpha, double beta);
  // A bucket of a successful step: its size and, under B-SAG with T > 1,
  // the k' it ran with against its block's k.
  void FeedBucket(uint64_t elements, uint64_t kprime_used, uint64_t k_block);
  // Once per epoch: nullopt until every rank's estimate and one bucket are in.
  std::optional<TeamDecision> Decide(const TeamChoice& current, double density);
  bool complete() const { return world_ > 0 && links_ == world_; }
  double alpha() const { return alpha_; }
  double beta() const { return beta_; }

 private:
  int world_ = 0;
  int links_ = 0;
  std::vector<bool> seen_;
  double alpha_ = 0, beta_ = 0;
  uint64_t elements_ = 0;
  double ratio_sum_ = 0;
  int ratio_count_ = 0;
  bool decided_ = false;
};

}  // namespace gradex::coordinator::controllers

#endif  // GRADEX_SERVICES_COORDINATOR_CONTROLLERS_TEAM_CHOICE_H_
