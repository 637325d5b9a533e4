// The UCP context and worker a rank keeps for its life, and its address.
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "transport/ucx_internal.h"

namespace gradex {
namespace ucx_internal {
namespace {

// Whether the effective UCX_TLS may select posix/sysv: UCX warns about
// every configuration key that no transport consumed.
bool MayUseSharedMemory(const std::string& tls_option) {
  std::string tls = tls_option;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    tls = env == nullptr ? "all" : env;
  }
  if (!tls.empty() && tls[0] == '^') return true;
  for (absl::string_view t : absl::StrSplit(tls, ',')) {
    if (t == "all" || t == "sm" || t == "shm" || t == "posix" || t == "sysv") return true;
  }
  return false;
}

}  // namespace

UcxWorkerImpl::~UcxWorkerImpl() {
  for (auto& r : orphans) {
    if (r->ucx != nullptr) ucp_request_free(r->ucx);
    r->ucx = nullptr;
  }
  // The orphans' buffers die only after this.
  if (worker != nullptr) ucp_worker_destroy(worker);
  if (context != nullptr) ucp_cleanup(context);
}

absl::Status UcxWorkerImpl::Init(const UcxOptions& options) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) {
    return absl::InternalError(absl::StrCat("ucp_config_read: ", ucs_status_string(st)));
  }
  auto modify = [&](const char* name, const std::string& value) -> absl::Status {
    ucs_status_t s = ucp_config_modify(config, name, value.c_str());
    if (s != UCS_OK) {
      return absl::InvalidArgumentError(
          absl::StrCat("UCX config ", name, "=", value, ": ", ucs_status_string(s)));
    }
    return absl::OkStatus();
  };
  absl::Status s;
  if (!options.tls.empty()) s = modify("TLS", options.tls);
  // Environment settings win over our defaults.
  if (s.ok() && options.shm_error_handling) {
    // UCP hands unknown keys to each UCT interface table without the
    // component prefix; in UCX 1.13 the flag sits in the "MM_" sub-table, so
    // this one key covers both posix and sysv (checked against ucp_ep_create).
    if (std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
        std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr && MayUseSharedMemory(options.tls)) {
      s = modify("MM_ERROR_HANDLING", "y");
    }
  }
  if (s.ok() && options.keepalive_interval.count() > 0 &&
      std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    s = modify("KEEPALIVE_INTERVAL", absl::StrCat(options.keepalive_interval.count(), "ms"));
  }
  if (!s.ok()) {
    ucp_config_release(config);
    return s;
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  st = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (st != UCS_OK) {
    context = nullptr;
    return absl::InternalError(absl::StrCat("ucp_init: ", ucs_status_string(st)));
  }
  // Serialized rather than single: the owner may hand the transport to
  // another thread (e.g. an agent's progress thread), never concurrently.
  ucp_worker_params_t wparams = {};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  st = ucp_worker_create(context, &wparams, &worker);
  if (st != UCS_OK) {
    worker = nullptr;
    return absl::InternalError(absl::StrCat("ucp_worker_create: ", ucs_status_string(st)));
  }
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  st = ucp_worker_get_address(worker, &address, &address_length);
  if (st != UCS_OK) {
    return absl::InternalError(absl::StrCat("ucp_worker_get_address: ", ucs_status_string(st)));
  }
  address_.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker, address);
  return absl::OkStatus();
}

}  // namespace ucx_internal

using ucx_internal::UcxWorkerImpl;

absl::StatusOr<std::shared_ptr<UcxWorker>> CreateUcxWorker(const UcxOptions& options) {
  auto w = std::make_shared<UcxWorkerImpl>();
  if (absl::Status s = w->Init(options); !s.ok()) return s;
  return std::shared_ptr<UcxWorker>(std::move(w));
}

}  // namespace gradex
