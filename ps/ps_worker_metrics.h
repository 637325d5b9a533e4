// A parameter-server worker's Prometheus metrics (docs/metrics.md,
// "Parameter-server worker"): steps, failed steps by
// reason, its staleness in versions (the last step's, and a histogram over
// steps), full syncs, bytes and entries each way, the step's wall time, the
// epoch and the job's staleness bound. On the registry PsWorker serves on
// GRADEX_METRICS_PORT (with gradex_ps_server_ on rank 0 hosting the server).
//
// Why no count of waits caused by max_staleness here: a shard holds a
// too-fast worker's push and answers it later (ps/dgs_exchange.h),
// and nothing in the reply tells the worker that it was held, so from this
// side a hold looks like a slow reply. The shard counts its holds
// (gradex_ps_server_held_pushes_total); a worker's waits are in
// gradex_ps_worker_step_duration_seconds.
//
// Every child is created up front, so that Record (once per Step, after the
// step and outside PsWorker's own lock) only increments atomics and observes
// two histograms (prometheus-cpp's per-histogram mutex, held for an add);
// the exporter reads them on its own thread and never blocks a step longer.
#ifndef GRADEX_PS_PS_WORKER_METRICS_H_
#define GRADEX_PS_PS_WORKER_METRICS_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace gradex::ps {

// Why a Step failed (the `reason` label). Stable names, see PsFailureName.
enum class PsFailure : uint8_t {
  kEpoch = 0,     // entering the epoch failed: no plan in time, the wire-up, the job's model
  kTimeout,       // a shard did not answer before the step's deadline (gone, or holding it)
  kUnavailable,   // the transport failed: a shard's process is gone or unreachable
  kRefused,       // a shard refused the push, or answered out of order
  kInvalidReply,  // a shard's reply failed validation
  kInvalidInput,  // this worker's gradient or parameters (a NaN or Inf)
  kOther,
  kCount,
};
std::string_view PsFailureName(PsFailure f);
// The reason of an exchange's error, by its code (ps/dgs_exchange.h).
PsFailure ClassifyExchangeError(const absl::Status& s);

// What one Step did, as PsWorker counted it into PsWorkerStats.
struct PsStepRecord {
  bool ok = false;
  PsFailure failure = PsFailure::kOther;  // when !ok
  double seconds = 0;                     // the Step's wall time (entering an epoch included)
  uint64_t sent_bytes = 0, recv_bytes = 0;
  uint64_t pushed_entries = 0, pulled_entries = 0;
  uint32_t full_syncs = 0;
  uint32_t epochs_entered = 0;  // by this Step, and by Follow since the last Step
  // After the step (ok only for staleness and version).
  uint64_t staleness = 0;
  uint64_t version = 0;
  uint32_t epoch = 0;
  uint64_t max_staleness = 0;  // the job's bound (0: unbounded)
};

class PsWorkerMetrics {
 public:
  explicit PsWorkerMetrics(prometheus::Registry& registry);

  void Record(const PsStepRecord& r);

 private:
  prometheus::Counter *steps_, *full_syncs_, *sent_bytes_, *recv_bytes_, *pushed_, *pulled_,
      *epochs_;
  std::array<prometheus::Counter*, static_cast<size_t>(PsFailure::kCount)> failed_{};
  prometheus::Gauge *staleness_last_, *version_, *epoch_, *bound_;
  prometheus::Histogram *staleness_, *seconds_;
};

}  // namespace gradex::ps

#endif  // GRADEX_PS_PS_WORKER_METRICS_H_
