// The client's two threads (client_impl.h): the selection thread prepares
// bucket b+1 (residual, local selection) while the progress thread exchanges
// bucket b; exchanges, step ends and `done` callbacks stay in issue order on
// the progress thread.
#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "services/client/client_impl.h"

namespace gradex::client {
namespace {

// Replaces NaN and infinite values by 0 (they are exchanged as 0) and says
// how many there were and where the first was.
absl::Status ZeroNonFinite(const std::vector<ParamSpan>& spans, std::span<float> data,
                           ClientMetrics* metrics) {
  size_t count = 0, first = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    if (std::isfinite(data[i])) continue;
    if (count++ == 0) first = i;
    data[i] = 0.0f;
  }
  if (count == 0) return absl::OkStatus();
  metrics->nonfinite_values.Increment(static_cast<double>(count));
  size_t at = 0;
  uint64_t key = 0;
  for (const ParamSpan& s : spans) {
    if (first < at + s.elements) {
      key = s.key;
      break;
    }
    at += s.elements;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "gradient has ", count, " NaN or infinite values (first: span ", key, " element ", first - at,
      "); they were exchanged as 0 and the result excludes them"));
}

}  // namespace

void ClientImpl::SelectLoop() {
  for (;;) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closing_; };
      mu_.Await(absl::Condition(&ready));
      if (closing_) {  // Close keeps what is left in the queue
        selector_done_ = true;
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    {
      absl::MutexLock lock(&state_mu_);
      Select(item);
    }
    absl::MutexLock lock(&mu_);
    ready_.push_back(std::move(item));
  }
}

void ClientImpl::WaitTurn(bool idle, const std::vector<const agent::BucketSlot*>& touched) {
  absl::MutexLock lock(&mu_);
  auto turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!ready_.empty()) return false;  // the previous bucket is not exchanging yet
    if (!exchanging_) return true;
    return !idle && std::find(touched.begin(), touched.end(), exchanging_slot_) == touched.end();
  };
  // Bounded by the exchange in progress, which its deadline bounds.
  mu_.Await(absl::Condition(&turn));
}

void ClientImpl::Select(Item& item) {
  size_t n = 0;
  for (const ParamSpan& s : item.spans) n += s.elements;
  if (n != item.data.size() || n == 0) {
    WaitTurn(!options_.pipeline, {});
    item.select_start = item.select_end = std::chrono::system_clock::now();
    item.status = absl::InvalidArgumentError(absl::StrCat(
        "bucket: its spans cover ", n, " elements, its data holds ", item.data.size()));
  } else if (n > options_.max_bucket_elements) {
    WaitTurn(!options_.pipeline, {});
    item.select_start = item.select_end = std::chrono::system_clock::now();
    item.status = absl::InvalidArgumentError(absl::StrCat("bucket of ", n, " elements: over ",
                                                          options_.max_bucket_elements,
                                                          " (ClientOptions.max_bucket_elements)"));
  } else {
    // A new step opens only when the previous one has ended (BeginStep and
    // EndStep never overlap the other thread); a bucket whose gathering
    // would touch the exchanging bucket's slot (DDP's rebuild moves spans
    // between layouts) waits for that exchange; without the pipeline every
    // bucket does.
    WaitTurn(!options_.pipeline || !step_open_, residuals_.Touched(item.spans));
    item.select_start = std::chrono::system_clock::now();
    absl::StatusOr<std::span<float>> host = item.data;
    if (item.memory == Memory::kDevice) {
      item.staging = next_staging_;
      next_staging_ ^= 1;
      host = staging_[item.staging].ToHost(item.data);
    }
    absl::StatusOr<agent::BucketSlot*> slot =
        host.ok() ? residuals_.Gather(item.spans) : host.status();
    if (!slot.ok()) {
      item.status = slot.status();
    } else {
      item.host = *host;
      if (!step_open_) {
        // A step that cannot begin (no epoch within the timeout) fails its
        // buckets in ExchangeBucket, which keeps their gradients.
        (void)agent_->BeginStep();
        step_sizes_.clear();
        step_open_ = true;
      }
      item.step = agent_->next_step();
      item.index =
          static_cast<uint32_t>(std::min<size_t>(step_sizes_.size(), agent::kMaxStepBuckets));
      step_sizes_.push_back(n);
      if (item.index >= agent::kMaxStepBuckets) {
        for (size_t i = 0; i < n; ++i) (*slot)->residual[i] += item.host[i];
        item.status = absl::InvalidArgumentError(
            absl::StrCat("over ", agent::kMaxStepBuckets,
                         " buckets in one step (is last_in_step ever set?); kept in the residual"));
      } else {
        // COVAP counts parts across the step's buckets: the last step's
        // sizes, the same on every rank, when this bucket matches them.
        std::span<const size_t> sizes;
        if (item.index < last_sizes_.size() && last_sizes_[item.index] == n) sizes = last_sizes_;
        item.status = options_.refuse_nonfinite
                          ? ZeroNonFinite(item.spans, item.host, client_metrics_.get())
                          : absl::OkStatus();
        item.call = std::make_unique<agent::BucketCall>();
        agent_->PlanBucket(item.index, sizes, item.host, *slot, item.call.get());
        agent::Agent::PrepareBucket(item.call.get());
      }
    }
    item.select_end = std::chrono::system_clock::now();
  }
  if (item.last_in_step && step_open_) {
    last_sizes_ = std::move(step_sizes_);
    step_sizes_.clear();
    step_open_ = false;
  }
}

absl::Status ClientImpl::Finish(Item& item, agent::BucketOutcome* out) {
  if (item.call == nullptr) return item.status;
  absl::Status s = agent_->ExchangeBucket(item.call.get(), out);
  if (!s.ok()) return s;  // the device data is untouched
  // Fails the bucket after its exchange (the peers are not held): its
  // residual had NaN or Inf entries, now 0.
  absl::Status residual = agent::NonFiniteResidual(item.index, out->stats);
  out->result.ToDense(item.host);
  if (options_.mean) {
    const float world = static_cast<float>(agent_->plan()->world());
    for (float& v : item.host) v /= world;
  }
  if (item.staging >= 0) {
    if (absl::Status d = staging_[item.staging].ToDevice(item.data); !d.ok()) return d;
  }
  if (!item.status.ok()) return item.status;  // the non-finite refusal, if any
  return residual;
}

void ClientImpl::ExchangeLoop() {
  for (;;) {
    Item item;
    bool cancel = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !ready_.empty() || (closing_ && selector_done_);
      };
      mu_.Await(absl::Condition(&ready));
      if (ready_.empty()) return;
      item = std::move(ready_.front());
      ready_.pop_front();
      exchanging_ = true;
      exchanging_slot_ = item.call != nullptr ? item.call->slot : nullptr;
      cancel = closing_;
      // Under the lock: the next bucket's selection starts after this.
      item.exchange_start = std::chrono::system_clock::now();
    }
    agent::BucketOutcome out;
    absl::Status s;
    if (cancel) {
      if (item.call != nullptr) agent::Agent::AbandonBucket(item.call.get());
      s = absl::CancelledError(
          "gradex client closed before the bucket was exchanged (kept in its residual)");
    } else {
      s = Finish(item, &out);
    }
    double residual_l2 = 0;
    if (item.call != nullptr && item.call->slot != nullptr) {
      double sq = 0;
      for (float v : item.call->slot->residual) sq += static_cast<double>(v) * v;
      residual_l2 = std::sqrt(sq);
    }
    if (item.last_in_step && agent_->step_open()) {
      agent::StepOutcome step;
      (void)agent_->EndStep(&step);  // its first error is every later bucket's already
    }
    rank_.store(agent_->connected() ? agent_->rank() : -1);
    if (const agent::Plan* p = agent_->plan()) world_.store(p->world());
    step_.store(agent_->next_step());
    Record(item, out, s, residual_l2, std::chrono::system_clock::now());
    item.done(s);
    absl::MutexLock lock(&mu_);
    exchanging_ = false;
    exchanging_slot_ = nullptr;
    --running_;
  }
}

}  // namespace gradex::client
