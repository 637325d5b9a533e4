#include "services/coordinator/controllers/bucket_controller.h"

#include <algorithm>
#include <cmath>

#include "catalog/bucket_algorithms.h"
#include "catalog/catalog.h"
#include "catalog/median.h"
#include "catalog/models.h"

namespace gradex::coordinator::controllers {
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
                                 double density, int world, int teams, uint64_t from) {
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
  // Each epoch's probes replace the last epoch's (links change with the
  // members) once they are all in.
  links_.assign(world_, {0.0, 0.0});
  links_in_ = 0;
  links_step_ = 0;
  for (Bucket& b : buckets_) ChooseAuto(b, from);
  Apply(kNone, from);  // the epoch's plan carries every choice
}

void BucketController::FeedLink(int rank, uint64_t step, double alpha, double beta) {
  if (rank < 0 || rank >= world_) return;
  if (!(alpha > 0 && alpha < 10 && beta >= 0 && beta < 1e-3)) return;  // the proto's ranges
  auto& mine = links_[rank];
  if (mine.first == 0) {
    ++links_in_;
    links_step_ = std::max(links_step_, step);
  }
  mine = {alpha, beta};
  if (links_in_ < world_) return;
  double a = 0, b = 0;
  for (const auto& [la, lb] : links_) a = std::max(a, la), b = std::max(b, lb);
  if (a == alpha_ && b == beta_) return;
  alpha_ = a;
  beta_ = b;
  // Decided by the probes' steps, wherever the last one's report arrived.
  for (Bucket& bucket : buckets_) ChooseAuto(bucket, std::max(links_step_, step));
}

void BucketController::SetCovapInterval(int interval, uint64_t step) {
  if (interval == covap_interval_) return;
  covap_interval_ = interval;
  for (Bucket& b : buckets_) ChooseAuto(b, step);
}

void BucketController::Feed(int rank, uint64_t step, const std::vector<BucketSample>& buckets,
                            absl::Time now) {
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
      slot.own_dense = dense && !s.dense_probe;
    } else if (slot.elements != s.elements || slot.algorithm != name || slot.dense != dense) {
      slot.valid = false;  // ranks disagree on what ran: not a sample
    }
    slot.valid = slot.valid && valid;
    slot.slowest = std::max(slot.slowest, s.seconds);
    ++slot.ranks;
  }
  if (o.count < world_) return;
  Close(step, o, now);
  open_.erase(it);
}

void BucketController::Close(uint64_t step, const Open& o, absl::Time now) {
  const size_t window = static_cast<size_t>(std::max(o_.window, 1));
  for (size_t i = 0; i < o.slots.size(); ++i) {
    const Slot& s = o.slots[i];
    if (!s.valid || s.ranks != world_) continue;
    if (buckets_.size() <= i) buckets_.resize(i + 1);
    Bucket& b = buckets_[i];
    if (b.elements != s.elements) {
      // A new bucket at this index (the trainer rebuilt its buckets): its
      // samples start afresh; what runs changes when the plan says so.
      Bucket renewed;
      renewed.elements = s.elements;
      renewed.applied_fallback = b.applied_fallback;
      renewed.applied_auto = b.applied_auto;
      b = std::move(renewed);
      ChooseAuto(b, step);
      MarkPending(b, step);
    }
    std::deque<double>* samples = &b.dense;
    if (s.own_dense && !b.fallback && !b.applied_fallback) b.warmup_step = step;
    if (!s.dense) {
      if (b.sparse_algorithm != s.algorithm) {  // another sparse algorithm
        b.sparse.clear();
        b.verdict = false;
        if (!b.fallback) b.fresh = b.votes = 0;
      }
      b.sparse_algorithm = s.algorithm;
      samples = &b.sparse;
    }
    samples->push_back(s.slowest);
    // A warm-up keeps more, for its verdict.
    const size_t keep = Warming(b, step) ? WarmupWindow() : window;
    while (samples->size() > keep) samples->pop_front();
    // Only the side that runs paces the judgements, and only with samples
    // taken since its switch was applied.
    if (s.dense != b.fallback || b.fresh_from == kNone || step < b.fresh_from) continue;
    if (++b.fresh < static_cast<int>(window)) continue;
    b.fresh = 0;
    Decide(static_cast<uint32_t>(i), b, step, now);
  }
}

void BucketController::Decide(uint32_t index, Bucket& b, uint64_t step, absl::Time now) {
  const size_t window = static_cast<size_t>(std::max(o_.window, 1));
  const size_t need = static_cast<size_t>(std::max(o_.min_samples, 1));
  const std::deque<double>& running = b.fallback ? b.dense : b.sparse;
  const std::deque<double>& other = b.fallback ? b.sparse : b.dense;
  const bool warmup = !b.fallback && Warming(b, step) && now >= b.hold_until;
  if (running.size() < (warmup ? WarmupWindow() : window) ||
      other.size() < (warmup ? WarmupWindow() : need)) {
    return;
  }
  const double sparse = catalog::Median(b.sparse), dense = catalog::Median(b.dense);
  if (warmup) {
    b.verdict = b.warmed = true;
    b.votes = 0;
    // Within the margin sparse stays: a near tie is not worth the bytes, and
    // timings that close would choose differently from run to run.
    if (!(dense < sparse * (1 - o_.margin))) {  // sparse it is: nothing changes
      kept_sparse_.push_back(Judged(index, b, sparse, dense, step));
      kept_sparse_.back().warmup = true;
      return;
    }
  } else if (!b.fallback && b.warmed) {
    return;  // chosen in its warm-up: it stays sparse
  } else {
    // While dense runs, the sparse window holds the last sparse runs: sparse
    // comes back when dense, measured every step, slows past it by the margin.
    const bool favoured =
        b.fallback ? sparse < dense * (1 - o_.margin) : dense < sparse * (1 - o_.margin);
    b.votes = favoured ? b.votes + 1 : 0;
    if (b.votes < std::max(o_.confirm_windows, 1) || now < b.hold_until) return;
  }
  b.fallback = !b.fallback;
  b.votes = 0;
  b.fresh_from = kNone;  // the new side's samples count once it runs
  ++b.switches;
  const absl::Duration hold = HoldAfter(b.switches);
  b.hold_until = now + hold;
  MarkPending(b, step);
  BucketSwitch& sw = switches_.emplace_back(Judged(index, b, sparse, dense, step));
  sw.to_dense = b.fallback;
  sw.hold = hold;
  sw.warmup = warmup;
}

bool BucketController::Warming(const Bucket& b, uint64_t step) {
  return !b.verdict && b.warmup_step != kNone && step <= b.warmup_step + 2;
}

size_t BucketController::WarmupWindow() const {
  return static_cast<size_t>(std::max({o_.window, o_.warmup_window, 1}));
}

BucketSwitch BucketController::Judged(uint32_t index, const Bucket& b, double sparse, double dense,
                                      uint64_t step) {
  return {.bucket = index,
          .sparse_seconds = sparse,
          .dense_seconds = dense,
          .sparse_samples = static_cast<int>(b.sparse.size()),
          .dense_samples = static_cast<int>(b.dense.size()),
          .decided_step = step,
          .switches = b.switches};
}

absl::Duration BucketController::HoldAfter(int switches) const {
  absl::Duration d = o_.dwell;
  for (int i = 1; i < switches && d < o_.max_dwell; ++i) d *= 2;
  return std::min(d, o_.max_dwell);
}

void BucketController::MarkPending(Bucket& b, uint64_t step) {
  if (b.fallback == b.applied_fallback && b.auto_choice == b.applied_auto &&
      b.fresh_from != kNone) {
    b.decided_step = kNone;  // back to what runs: nothing to publish
    return;
  }
  // A later decision of the same bucket moves its change to the later step.
  b.decided_step = b.decided_step == kNone ? step : std::max(b.decided_step, step);
}

void BucketController::ChooseAuto(Bucket& b, uint64_t step) const {
  std::string best;
  if (auto_ && b.elements > 0) {
    double best_s = 0;
    best = CheapestAlgorithm(world_, teams_, b.elements, density_, alpha(), beta(), &best_s,
                             covap_interval_);
    if (!b.auto_choice.empty()) {
      // Hysteresis, as for the team count: a noisy link estimate must not
      // flip a bucket's algorithm at every epoch.
      const double cur = ModelSeconds(b.auto_choice, world_, teams_, b.elements, density_, alpha(),
                                      beta(), covap_interval_);
      if (std::isfinite(cur) && !(best_s < cur * (1 - o_.margin))) best = b.auto_choice;
    }
  }
  if (best == b.auto_choice) return;
  b.auto_choice = std::move(best);
  MarkPending(b, step);
}

uint64_t BucketController::PendingSince() const {
  uint64_t first = kNone;
  for (const Bucket& b : buckets_) first = std::min(first, b.decided_step);
  return first;
}

void BucketController::Apply(uint64_t decided_by, uint64_t from) {
  for (Bucket& b : buckets_) {
    if (b.decided_step == kNone || b.decided_step > decided_by) continue;
    b.decided_step = kNone;
    b.applied_auto = b.auto_choice;
    if (b.applied_fallback == b.fallback && b.fresh_from != kNone) continue;
    b.applied_fallback = b.fallback;
    b.fresh_from = from;
    b.fresh = 0;
  }
}

std::vector<std::string> BucketController::Choices() const {
  std::vector<std::string> out(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    std::string c =
        b.applied_fallback ? std::string(catalog::DenseFallbackAlgorithm()) : b.applied_auto;
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

std::vector<BucketSwitch> BucketController::TakeKeptSparse() {
  std::vector<BucketSwitch> out;
  out.swap(kept_sparse_);
  return out;
}

int BucketController::dense_buckets() const {
  int n = 0;
  for (const Bucket& b : buckets_) n += b.applied_fallback ? 1 : 0;
  return n;
}

}  // namespace gradex::coordinator::controllers
