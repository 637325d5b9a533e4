#include "services/coordinator/controllers/ccr_profiler.h"

#include <algorithm>
#include <cmath>

#include "catalog/median.h"

namespace gradex::coordinator::controllers {
namespace {

// Open (incomplete) steps kept: a rank whose reports are dropped must not
// grow them without limit.
constexpr size_t kMaxOpen = 64;

}  // namespace

CcrProfiler::CcrProfiler(int world, int min_steps, int start, int max_interval, int window,
                         double margin)
    : world_(std::max(world, 0)),
      min_steps_(std::max(min_steps, 1)),
      max_interval_(std::max(max_interval, 1)),
      window_(std::max({window, min_steps, 1})),
      margin_(margin),
      interval_(std::clamp(start, 1, std::max(max_interval, 1))) {}

bool CcrProfiler::Feed(int rank, uint64_t step, double exchange_seconds, double compute_seconds,
                       int ran_interval) {
  if (rank < 0 || rank >= world_ || ran_interval < 1 || ran_interval > (1 << 20)) return false;
  // The report's own bounds ([0, a day]) were checked on receipt; NaN too.
  if (!(exchange_seconds >= 0 && compute_seconds >= 0)) return false;
  auto it = open_.find(step);
  if (it == open_.end()) {
    if (open_.size() >= kMaxOpen) open_.erase(open_.begin());
    it = open_.emplace(step, StepAcc{HUGE_VAL, 0, std::vector<bool>(world_), 0}).first;
  }
  StepAcc& a = it->second;
  if (a.seen[rank]) return false;
  a.seen[rank] = true;
  ++a.count;
  a.min_comm = std::min(a.min_comm, exchange_seconds * ran_interval);
  a.sum_compute += compute_seconds;
  if (a.count < world_) return false;
  comm_.push_back(a.min_comm);
  compute_.push_back(a.sum_compute / world_);
  open_.erase(it);
  while (static_cast<int>(comm_.size()) > window_) {
    comm_.pop_front();
    compute_.pop_front();
  }
  if (static_cast<int>(comm_.size()) < min_steps_) return false;
  const double comp = catalog::Median(compute_);
  // No computation measured: communication is all there is.
  ccr_ = comp > 0 ? catalog::Median(comm_) / comp : static_cast<double>(max_interval_);
  const int want =
      static_cast<int>(std::clamp(std::ceil(ccr_ - 1e-9), 1.0, static_cast<double>(max_interval_)));
  if (want == interval_) {
    measured_ = true;
    return false;
  }
  // The first measurement replaces the configured guess; later ones move I
  // only when CCR leaves (I-1, I] by the margin.
  if (measured_ && ccr_ > (interval_ - 1) * (1 - margin_) && ccr_ <= interval_ * (1 + margin_)) {
    return false;
  }
  measured_ = true;
  interval_ = want;
  return true;
}

}  // namespace gradex::coordinator::controllers
