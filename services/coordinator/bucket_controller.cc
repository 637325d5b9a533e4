#include "services/coordinator/bucket_controller.h"

#include <algorithm>
#include <cmath>

#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "catalog/median.h"
#include "catalog/models.h"

namespace gradex::coordinator {
namespace {

// Open steps kept while their reports arrive: a rank whose reports are
// dropped must not grow them without limit (its steps are never counted).
constexpr size_t kMaxOpenSteps = 64;

bool RunsOn(const catalog::AlgorithmSpec& spec, int world, int teams) {
  if (!spec.traits.uses_teams) return true;
  if (teams < 1 || world % teams != 0) return false;
  return !spec.traits.teams_power_of_two || catalog::IsPowerOfTwo(teams);
}

double Price(const catalog::AlgorithmSpec& spec, int world, int teams, uint64_t elements,
             double density, double alpha, double beta, int covap_interval) {
  if (spec.table1_cost == nullptr || world < 1 || !RunsOn(spec, world, teams)) return HUGE_VAL;
  const catalog::CostRange c =
      spec.table1_cost({.world = world,
                        .elements = elements,
                        .density = density,
                        .teams = spec.traits.uses_teams ? teams : 1,
                        .kprime_ratio = 0,  // B-SAG: k' over its whole range
                        .covap_interval = covap_interval});
  return c.latency_hi * alpha + c.bytes_hi * beta;
}

}  // namespace

double ModelSeconds(const std::string& algorithm, int world, int teams, uint64_t elements,
                    double density, double alpha, double beta, int covap_interval) {
  const catalog::AlgorithmSpec* spec = catalog::Find(algorithm);
  return spec == nullptr
             ? HUGE_VAL
             : Price(*spec, world, teams, elements, density, alpha, beta, covap_interval);
}

std::string CheapestAlgorithm(int world, int teams, uint64_t elements, double density, double alpha,
                              double beta, double* seconds, int covap_interval) {
  const catalog::AlgorithmSpec* best = nullptr;
  double best_s = HUGE_VAL;
  for (const catalog::AlgorithmSpec* spec : catalog::All()) {  // by id: ties to the older
    const double s = Price(*spec, world, teams, elements, density, alpha, beta, covap_interval);
    if (s < best_s) {
      best = spec;
      best_s = s;
    }
  }
  if (seconds != nullptr) *seconds = best_s;
  return best == nullptr ? std::string() : best->name;
}

void BucketController::Configure(const std::string& plan_algorithm, bool auto_choice,
                                 double density, int world, int teams) {
  if (world != world_ || teams != teams_) {
    // Timings of another P or T say nothing about this one.
    buckets_.clear();
    open_.clear();
    alpha_ = beta_ = 0;
  }
  algorithm_ = plan_algorithm;
  auto_ = auto_choice;
  density_ = density;
  world_ = std::max(world, 0);
  teams_ = std::max(teams, 1);
  links_fresh_ = false;
  for (Bucket& b : buckets_) ChooseAuto(b);
}

void BucketController::FeedLink(double alpha, double beta) {
  if (!(alpha > 0 && alpha < 10 && beta >= 0 && beta < 1e-3)) return;  // the proto's ranges
  // Each epoch's probes replace the last epoch's (links change with the
  // members); within an epoch the slowest rank's link counts.
  if (!links_fresh_) alpha_ = beta_ = 0;
  links_fresh_ = true;
  const double a = std::max(alpha_, alpha), b = std::max(beta_, beta);
  if (a == alpha_ && b == beta_) return;
  alpha_ = a;
  beta_ = b;
  for (Bucket& bucket : buckets_) ChooseAuto(bucket);
}

void BucketController::SetCovapInterval(int interval) {
  if (interval == covap_interval_) return;
  covap_interval_ = interval;
  for (Bucket& b : buckets_) ChooseAuto(b);
}

void BucketController::Feed(int rank, uint64_t step, const std::vector<BucketSample>& buckets) {
  if (rank < 0 || rank >= world_ || buckets.size() > catalog::kMaxBucketAlgorithms) return;
  auto it = open_.find(step);
  if (it == open_.end()) {
    if (open_.size() >= kMaxOpenSteps) open_.erase(open_.begin());  // the oldest, incomplete
    Open o;
    o.seen.assign(world_, false);
    it = open_.emplace(step, std::move(o)).first;
  }
  Open& o = it->second;
  if (o.seen[rank]) return;
  o.seen[rank] = true;
  ++o.count;
  if (o.slots.size() < buckets.size()) o.slots.resize(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    const BucketSample& s = buckets[i];
    Slot& slot = o.slots[i];
    const std::string& name = s.algorithm.empty() ? algorithm_ : s.algorithm;
    const catalog::AlgorithmSpec* spec = catalog::Find(name);
    const bool valid = spec != nullptr && s.elements > 0 && std::isfinite(s.seconds) &&
                       s.seconds >= 0 && s.seconds <= 86400;
    const bool dense = s.dense_probe || (spec != nullptr && spec->traits.dense);
    if (slot.ranks == 0) {
      slot.elements = s.elements;
      slot.algorithm = name;
      slot.dense = dense;
    } else if (slot.elements != s.elements || slot.algorithm != name || slot.dense != dense) {
      slot.valid = false;  // ranks disagree on what ran: not a sample
    }
    slot.valid = slot.valid && valid;
    slot.slowest = std::max(slot.slowest, s.seconds);
    ++slot.ranks;
  }
  if (o.count < world_) return;
  Close(o);
  open_.erase(it);
}

void BucketController::Close(const Open& step) {
  for (size_t i = 0; i < step.slots.size(); ++i) {
    const Slot& s = step.slots[i];
    if (!s.valid || s.ranks != world_) continue;
    if (buckets_.size() <= i) buckets_.resize(i + 1);
    Bucket& b = buckets_[i];
    if (b.elements != s.elements) {
      b = Bucket();  // a new bucket at this index (the trainer rebuilt its buckets)
      b.elements = s.elements;
      ChooseAuto(b);
    }
    std::deque<double>* window = &b.dense;
    if (!s.dense) {
      if (b.sparse_algorithm != s.algorithm) b.sparse.clear();  // another sparse algorithm
      b.sparse_algorithm = s.algorithm;
      window = &b.sparse;
    }
    window->push_back(s.slowest);
    while (static_cast<int>(window->size()) > std::max(o_.window, 1)) window->pop_front();
    Decide(static_cast<uint32_t>(i), b);
  }
}

void BucketController::Decide(uint32_t index, Bucket& b) {
  const int need = std::max(o_.min_samples, 1);
  if (static_cast<int>(b.sparse.size()) < need || static_cast<int>(b.dense.size()) < need) return;
  const double sparse = catalog::Median(b.sparse), dense = catalog::Median(b.dense);
  // While dense runs, the sparse window holds the last sparse runs: sparse
  // comes back when dense, measured every step, slows past it by the margin.
  const bool flip =
      b.fallback ? sparse < dense * (1 - o_.margin) : dense < sparse * (1 - o_.margin);
  if (!flip) return;
  b.fallback = !b.fallback;
  switches_.push_back({index, b.fallback, sparse, dense});
}

void BucketController::ChooseAuto(Bucket& b) const {
  if (!auto_ || b.elements == 0) {
    b.auto_choice.clear();
    return;
  }
  double best_s = 0;
  std::string best = CheapestAlgorithm(world_, teams_, b.elements, density_, alpha(), beta(),
                                       &best_s, covap_interval_);
  if (!b.auto_choice.empty()) {
    // Hysteresis, as for the team count: a noisy link estimate must not
    // flip a bucket's algorithm at every epoch.
    const double cur = ModelSeconds(b.auto_choice, world_, teams_, b.elements, density_, alpha(),
                                    beta(), covap_interval_);
    if (std::isfinite(cur) && !(best_s < cur * (1 - o_.margin))) return;
  }
  b.auto_choice = std::move(best);
}

std::vector<std::string> BucketController::Choices() const {
  std::vector<std::string> out(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    std::string c = b.fallback ? std::string(catalog::DenseFallbackAlgorithm()) : b.auto_choice;
    out[i] = c == algorithm_ ? std::string() : std::move(c);
  }
  while (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::vector<BucketSwitch> BucketController::TakeSwitches() {
  std::vector<BucketSwitch> out;
  out.swap(switches_);
  return out;
}

int BucketController::dense_buckets() const {
  int n = 0;
  for (const Bucket& b : buckets_) n += b.fallback ? 1 : 0;
  return n;
}

}  // namespace gradex::coordinator
