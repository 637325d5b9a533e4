#include "services/coordinator/controllers/controllers.h"

#include <algorithm>
#include <cmath>

#include "catalog/catalog.h"

namespace gradex::coordinator::controllers {
namespace {

// Bounds the open (incomplete) steps a profiler or consensus keeps: a rank
// that never reports must not grow them without limit.
constexpr size_t kMaxOpen = 64;

bool IsPowerOfTwo(int v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

TeamChoice ChooseTeams(const std::string& algorithm, int configured_teams, int world,
                       bool prefer_rsag) {
  TeamChoice c{1, algorithm};
  int t = std::min(std::max(configured_teams, 1), std::max(world, 1));
  while (t > 1 && world % t != 0) --t;
  c.teams = t;
  const catalog::Traits traits = catalog::TraitsOf(algorithm);
  if (traits.uses_teams && (prefer_rsag || traits.teams_power_of_two)) {
    // R-SAG only runs on a power-of-two team count; B-SAG runs on any.
    c.algorithm = catalog::TeamAlgorithmFor(IsPowerOfTwo(t));
  }
  return c;
}

bool KPrimeTable::Feed(uint32_t bucket, uint64_t elements, int team_position, uint64_t kprime_used,
                       uint64_t post_gather_count, uint64_t step, int world, int teams,
                       double density) {
  if (teams < 1 || world % teams != 0) return false;
  const int q = world / teams;
  if (team_position < 0 || team_position >= q) return false;
  auto key = std::make_pair(bucket, team_position);
  auto it = table_.find(key);
  if (it == table_.end() || it->second.elements != elements) {
    if (table_.size() >= (size_t{1} << 16) && it == table_.end()) return false;
    KPrimeController c(BlockKeep(elements, q, team_position, density), teams);
    it = table_.insert_or_assign(key, Entry{c, elements, 0, false}).first;
  }
  Entry& e = it->second;
  if ((e.fed && step <= e.last_step) || kprime_used != e.controller.kprime()) return false;
  uint64_t before = e.controller.kprime();
  e.controller.Update(post_gather_count);
  e.last_step = step;
  e.fed = true;
  return e.controller.kprime() != before;
}

std::vector<std::pair<std::pair<uint32_t, int>, uint64_t>> KPrimeTable::Values() const {
  std::vector<std::pair<std::pair<uint32_t, int>, uint64_t>> v;
  v.reserve(table_.size());
  for (const auto& [key, e] : table_) v.push_back({key, e.controller.kprime()});
  return v;
}

bool BoundaryConsensus::Feed(int rank, uint32_t bucket, uint64_t elements, uint64_t step,
                             const std::vector<uint32_t>& inner,
                             std::optional<AgreedRegions>* done) {
  if (rank < 0 || rank >= world_ || static_cast<int>(inner.size()) != world_ - 1) return false;
  auto key = std::make_pair(bucket, step);
  auto it = pending_.find(key);
  if (it == pending_.end()) {
    if (pending_.size() >= kMaxOpen) pending_.erase(pending_.begin());  // oldest (bucket, step)
    Pending p{elements, std::vector<uint64_t>(inner.size(), 0), std::vector<bool>(world_), 0};
    it = pending_.emplace(key, std::move(p)).first;
  }
  Pending& p = it->second;
  if (p.elements != elements || p.seen[rank]) return false;
  p.seen[rank] = true;
  ++p.count;
  for (size_t j = 0; j < inner.size(); ++j) p.sums[j] += inner[j];
  if (p.count == world_) {
    AgreedRegions r{bucket, elements, step, std::vector<uint32_t>(world_ + 1)};
    r.boundaries[0] = 0;
    // The mean of nondecreasing sequences is nondecreasing; each <= elements.
    for (int j = 1; j < world_; ++j)
      r.boundaries[j] = static_cast<uint32_t>(p.sums[j - 1] / world_);
    r.boundaries[world_] = static_cast<uint32_t>(elements);
    *done = std::move(r);
    pending_.erase(it);
  }
  return true;
}

}  // namespace gradex::coordinator::controllers
