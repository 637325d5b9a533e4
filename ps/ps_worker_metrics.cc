#include "ps/ps_worker_metrics.h"

#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gradex::ps {
namespace {

prometheus::Counter* Counter(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}
prometheus::Gauge* Gauge(prometheus::Registry& r, const char* name, const char* help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

std::string_view PsFailureName(PsFailure f) {
  switch (f) {
    case PsFailure::kEpoch:
      return "epoch";
    case PsFailure::kTimeout:
      return "timeout";
    case PsFailure::kUnavailable:
      return "unavailable";
    case PsFailure::kRefused:
      return "refused";
    case PsFailure::kInvalidReply:
      return "invalid_reply";
    case PsFailure::kInvalidInput:
      return "invalid_input";
    default:
      return "other";
  }
}

PsFailure ClassifyExchangeError(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kDeadlineExceeded:
      return PsFailure::kTimeout;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return PsFailure::kUnavailable;
    case absl::StatusCode::kFailedPrecondition:  // DgsWorkerState::ApplyPull: kRefused, order
      return PsFailure::kRefused;
    case absl::StatusCode::kDataLoss:  // dgs_frames.h's decoders
      return PsFailure::kInvalidReply;
    case absl::StatusCode::kInvalidArgument:  // DgsWorkerState::MakePush: a NaN or Inf
      return PsFailure::kInvalidInput;
    default:
      return PsFailure::kOther;
  }
}

PsWorkerMetrics::PsWorkerMetrics(prometheus::Registry& r)
    : steps_(Counter(r, "gradex_ps_worker_steps_total", "PsWorker steps that succeeded")),
      full_syncs_(Counter(r, "gradex_ps_worker_full_syncs_total",
                          "Full model syncs applied (joins, rejoins, every full_sync_every)")),
      sent_bytes_(Counter(r, "gradex_ps_worker_sent_bytes_total",
                          "Bytes sent to the server shards (pushes, hellos)")),
      recv_bytes_(Counter(r, "gradex_ps_worker_received_bytes_total",
                          "Bytes received from the server shards (pulls, full syncs, refusals)")),
      pushed_(Counter(r, "gradex_ps_worker_pushed_entries_total",
                      "Entries pushed (the sparsified update, all shards)")),
      pulled_(Counter(r, "gradex_ps_worker_pulled_entries_total",
                      "Entries of sparse pulls applied (full syncs not counted)")),
      epochs_(Counter(r, "gradex_ps_worker_epoch_changes_total",
                      "Epochs entered (joins, and rejoins after a membership change)")),
      staleness_last_(Gauge(r, "gradex_ps_worker_last_staleness_versions",
                            "Versions other workers pushed between this worker's last two pulls "
                            "(the most over shards), at its last successful step")),
      version_(Gauge(r, "gradex_ps_worker_version",
                     "Sum over shards of the model version last applied")),
      epoch_(Gauge(r, "gradex_ps_worker_epoch", "The epoch of the worker's communicator")),
      bound_(Gauge(r, "gradex_ps_worker_staleness_bound_versions",
                   "The job's staleness bound max_staleness (0: unbounded)")),
      staleness_(&prometheus::BuildHistogram()
                      .Name("gradex_ps_worker_staleness_versions")
                      .Help("Staleness of each successful step's push (versions behind)")
                      .Register(r)
                      .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 4, 8, 16, 32, 64,
                                                                       128, 256, 1024})),
      seconds_(&prometheus::BuildHistogram()
                    .Name("gradex_ps_worker_step_duration_seconds")
                    .Help("Wall time of each step (push, the shards' replies, any wait they "
                          "hold it for; entering an epoch included), failed ones too")
                    .Register(r)
                    .Add({}, prometheus::Histogram::BucketBoundaries{
                                 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1, 3, 10, 30})) {
  auto& failed = prometheus::BuildCounter()
                     .Name("gradex_ps_worker_failed_steps_total")
                     .Help("PsWorker steps that returned an error, by reason")
                     .Register(r);
  for (size_t i = 0; i < failed_.size(); ++i) {
    failed_[i] = &failed.Add({{"reason", std::string(PsFailureName(static_cast<PsFailure>(i)))}});
  }
}

void PsWorkerMetrics::Record(const PsStepRecord& r) {
  sent_bytes_->Increment(static_cast<double>(r.sent_bytes));
  recv_bytes_->Increment(static_cast<double>(r.recv_bytes));
  pushed_->Increment(static_cast<double>(r.pushed_entries));
  pulled_->Increment(static_cast<double>(r.pulled_entries));
  full_syncs_->Increment(r.full_syncs);
  if (r.epochs_entered > 0) epochs_->Increment(r.epochs_entered);
  epoch_->Set(r.epoch);
  bound_->Set(static_cast<double>(r.max_staleness));
  seconds_->Observe(r.seconds);
  if (!r.ok) {
    failed_[static_cast<size_t>(r.failure)]->Increment();
    return;
  }
  steps_->Increment();
  staleness_last_->Set(static_cast<double>(r.staleness));
  staleness_->Observe(static_cast<double>(r.staleness));
  version_->Set(static_cast<double>(r.version));
}

}  // namespace gradex::ps
