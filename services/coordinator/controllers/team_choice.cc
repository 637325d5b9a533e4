#include "services/coordinator/controllers/team_choice.h"

#include <algorithm>
#include <cmath>

#include "catalog/catalog.h"

namespace gradex::coordinator::controllers {
namespace {

bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

double SagSeconds(const std::string& algorithm, int world, uint64_t elements, double density,
                  int teams, double kprime_ratio, double alpha, double beta) {
  const catalog::AlgorithmSpec* spec = catalog::Find(algorithm);
  if (spec == nullptr || spec->table1_cost == nullptr || teams < 1) return HUGE_VAL;
  // B-SAG's k' ratio: the controller's start, 1/T, when none was measured.
  const double r = kprime_ratio > 0 ? kprime_ratio : 1.0 / teams;
  const catalog::CostRange c = spec->table1_cost({.world = world,
                                                  .elements = elements,
                                                  .density = density,
                                                  .teams = teams,
                                                  .kprime_ratio = r});
  return c.latency_lo * alpha + c.bytes_lo * beta;
}

std::vector<TeamCandidate> TeamCandidates(int world, uint64_t elements, double density,
                                          double kprime_ratio, double alpha, double beta) {
  std::vector<TeamCandidate> out;
  for (int t = 1; t <= std::max(world, 1); ++t) {
    if (world % t != 0) continue;
    TeamCandidate c{t, catalog::TeamAlgorithmFor(IsPowerOfTwo(t)), 0};
    c.seconds = SagSeconds(c.algorithm, world, elements, density, t, kprime_ratio, alpha, beta);
    out.push_back(std::move(c));
  }
  return out;
}

TeamDecision DecideTeams(const TeamChoice& current, int world, uint64_t elements, double density,
                         double kprime_ratio, double alpha, double beta, double min_gain) {
  TeamDecision d;
  d.choice = current;
  std::vector<TeamCandidate> all =
      TeamCandidates(world, elements, density, kprime_ratio, alpha, beta);
  const TeamCandidate* best = nullptr;
  for (const TeamCandidate& c : all) {
    // Strictly cheaper wins; on a tie the earlier (fewer teams) stays, unless
    // it is not a power of two and this one is (R-SAG preferred).
    if (best == nullptr || c.seconds < best->seconds * (1 - 1e-12) ||
        (c.seconds <= best->seconds * (1 + 1e-12) && IsPowerOfTwo(c.teams) &&
         !IsPowerOfTwo(best->teams))) {
      best = &c;
    }
  }
  if (best == nullptr) return d;
  const catalog::Traits traits = catalog::TraitsOf(current.algorithm);
  const bool current_valid = current.teams >= 1 && world % current.teams == 0 &&
                             traits.uses_teams &&
                             (!traits.teams_power_of_two || IsPowerOfTwo(current.teams));
  d.current_seconds = current_valid ? SagSeconds(current.algorithm, world, elements, density,
                                                 current.teams, kprime_ratio, alpha, beta)
                                    : HUGE_VAL;
  d.best_seconds = best->seconds;
  if (best->teams == current.teams && best->algorithm == current.algorithm) return d;
  if (current_valid && !(best->seconds < (1 - min_gain) * d.current_seconds)) return d;
  d.choice = TeamChoice{best->teams, best->algorithm};
  d.changed = true;
  return d;
}

void AutoTeams::Reset(int world) {
  *this = AutoTeams();
  world_ = std::max(world, 0);
  seen_.assign(world_, false);
}

void AutoTeams::FeedLink(int rank, double alpha, double beta) {
  if (rank < 0 || rank >= world_ || seen_[rank]) return;  // one probe per rank per epoch
  seen_[rank] = true;
  ++links_;
  alpha_ = std::max(alpha_, alpha);
  beta_ = std::max(beta_, beta);
}

void AutoTeams::FeedBucket(uint64_t elements, uint64_t kprime_used, uint64_t k_block) {
  elements_ = std::max(elements_, elements);
  if (kprime_used > 0 && k_block > 0 && ratio_count_ < (1 << 20)) {
    ratio_sum_ += std::min(1.0, static_cast<double>(kprime_used) / static_cast<double>(k_block));
    ++ratio_count_;
  }
}

std::optional<TeamDecision> AutoTeams::Decide(const TeamChoice& current, double density) {
  if (decided_ || !complete() || elements_ == 0) return std::nullopt;
  decided_ = true;
  const double ratio = ratio_count_ > 0 ? ratio_sum_ / ratio_count_ : 0;
  return DecideTeams(current, world_, elements_, density, ratio, alpha_, beta_);
}

}  // namespace gradex::coordinator::controllers
