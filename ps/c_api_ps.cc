// The C ABI's parameter-server worker (gradex.h, gradex_ps_*) over
// gradex::ps::PsWorker (ps_worker.h).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ps/ps_option_table.h"
#include "ps/ps_worker.h"
#include "services/client/c_api_internal.h"
#include "services/client/gradex.h"

struct gradex_ps_worker {
  std::unique_ptr<gradex::ps::PsWorker> worker;
};

using gradex::client::Fail;
using gradex::client::Report;

extern "C" {

int gradex_ps_create(const uint32_t* layer_sizes, size_t layers, const char* const* keys,
                     const char* const* values, size_t count, int use_env,
                     const gradex_rendezvous* rendezvous, gradex_ps_worker** out) {
  if (out == nullptr) return Fail(absl::InvalidArgumentError("gradex_ps_create: out is NULL"));
  *out = nullptr;
  if (layer_sizes == nullptr || layers == 0 || layers > 65536) {
    return Fail(absl::InvalidArgumentError("gradex_ps_create: 1..65536 layer sizes"));
  }
  if (count > 0 && (keys == nullptr || values == nullptr)) {
    return Fail(absl::InvalidArgumentError("gradex_ps_create: keys or values is NULL"));
  }
  gradex::ps::PsWorkerOptions o;
  if (use_env) {
    if (absl::Status s = gradex::client::ApplyEnvironment(&o.client); !s.ok()) return Fail(s);
    if (absl::Status s = gradex::ps::ApplyPsEnvironment(&o); !s.ok()) return Fail(s);
  }
  o.layer_sizes.assign(layer_sizes, layer_sizes + layers);
  for (size_t i = 0; i < count; ++i) {
    if (keys[i] == nullptr || values[i] == nullptr) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("gradex_ps_create: option ", i, " is NULL")));
    }
    if (absl::Status s = gradex::ps::SetPsFromCKey(&o, keys[i], values[i]); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<gradex::ps::PsWorker>> w =
      gradex::ps::PsWorker::Create(std::move(o), gradex::client::FromC(rendezvous));
  if (!w.ok()) return Fail(w.status());
  *out = new gradex_ps_worker{*std::move(w)};
  return Report(absl::OkStatus());
}

int gradex_ps_step(gradex_ps_worker* w, const float* grad, float* params, size_t n, float lr) {
  if (w == nullptr || grad == nullptr || params == nullptr) {
    return Fail(absl::InvalidArgumentError("gradex_ps_step: NULL worker, grad or params"));
  }
  return Report(w->worker->Step(std::span<const float>(grad, n), std::span<float>(params, n), lr));
}

int gradex_ps_stats(const gradex_ps_worker* w, gradex_ps_stats_t* out) {
  if (w == nullptr || out == nullptr) {
    return Fail(absl::InvalidArgumentError("gradex_ps_stats: NULL worker or out"));
  }
  const gradex::ps::PsWorkerStats s = w->worker->Stats();
  std::memset(out, 0, sizeof(*out));
  out->epoch = s.epoch;
  out->worker = s.worker;
  out->steps = s.steps;
  out->failed_steps = s.failed_steps;
  out->version = s.version;
  out->staleness = s.staleness;
  out->max_staleness_seen = s.max_staleness_seen;
  out->sent_bytes = s.sent_bytes;
  out->recv_bytes = s.recv_bytes;
  out->last_sent_bytes = s.last_sent_bytes;
  out->last_recv_bytes = s.last_recv_bytes;
  out->pushed_entries = s.pushed_entries;
  out->pulled_entries = s.pulled_entries;
  out->full_syncs = s.full_syncs;
  out->epochs_entered = s.epochs_entered;
  return Report(absl::OkStatus());
}

int gradex_ps_close(gradex_ps_worker* w) {
  if (w == nullptr) return Fail(absl::InvalidArgumentError("gradex_ps_close: NULL worker"));
  return Report(w->worker->Close());
}

void gradex_ps_destroy(gradex_ps_worker* w) {
  if (w == nullptr) return;
  (void)w->worker->Close();
  delete w;
}

}  // extern "C"
