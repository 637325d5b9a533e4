// The UCP context and worker a rank keeps for its life, and its address.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "transport/ucx/internal.h"
#include "transport/ucx/sockaddr.h"

namespace gradex::transport::ucx {
namespace internal {
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

// The TLS list to set, or "" to keep UCX's: an explicit list without tcp gets
// it added (endpoints used to be opened through UCX's connection manager,
// which wires up over tcp; the tests' transport lists were tuned with it), and
// UCX still puts the data on the best lanes (shared memory on one host).
std::string WithConnectionManager(const std::string& tls_option) {
  std::string tls = tls_option;
  if (tls.empty()) {
    const char* env = std::getenv("UCX_TLS");
    if (env == nullptr) return "";
    tls = env;
  }
  if (tls.empty() || tls[0] == '^') return tls_option;
  bool known = false;  // a list of unknown names stays as it is: UCX refuses it
  for (absl::string_view t : absl::StrSplit(tls, ',')) {
    if (t == "all" || t == "tcp") return tls_option;
    for (absl::string_view k :
         {"sm",    "shm",  "posix", "sysv",      "mm",       "cma",      "knem",
          "xpmem", "rc",   "ud",    "dc",        "rc_x",     "ud_x",     "dc_x",
          "rc_v",  "ud_v", "ib",    "cuda_copy", "cuda_ipc", "gdr_copy", "self"}) {
      known = known || t == k;
    }
  }
  return known ? tls + ",tcp" : tls_option;
}

// Whether the machine has an RDMA device (InfiniBand/RoCE): there UCX's
// rendezvous is zero-copy and its own threshold is the right one.
bool HasRdmaDevice() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// The data-plane IP: UcxOptions::listen_ip, else 127.0.0.1.
std::string ListenIp(const UcxOptions& options) {
  return options.listen_ip.empty() ? "127.0.0.1" : options.listen_ip;
}

// The name of the network interface that holds `ip` ("lo" for any of
// 127.0.0.0/8), or "" when none does.
std::string InterfaceOf(const std::string& ip) {
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, ip.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, ip.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    if (is_v4 && a->ifa_addr->sa_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      const bool loop_range = (ntohl(v4.s_addr) >> 24) == 127 && (a->ifa_flags & IFF_LOOPBACK);
      if (in->sin_addr.s_addr == v4.s_addr || loop_range) name = a->ifa_name;
    } else if (is_v6 && a->ifa_addr->sa_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (std::memcmp(&in->sin6_addr, &v6, sizeof v6) == 0) name = a->ifa_name;
    }
  }
  freeifaddrs(list);
  return name;
}

}  // namespace

UcxWorkerImpl::~UcxWorkerImpl() {
  hello_.reset();  // its thread reads nothing of UCX's, but stops first
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
  if (std::string tls = WithConnectionManager(options.tls); !tls.empty()) s = modify("TLS", tls);
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
  // Where the data goes over TCP (no RDMA device): UCX's TCP transport
  // listens on, and stripes data over, every interface it finds, while the
  // data plane is meant to use the one it was given; and its rendezvous over
  // TCP costs more than eager copies up to rndv_thresh_bytes.
  const bool tcp_only = !HasRdmaDevice();
  if (s.ok() && tcp_only && options.pin_net_device && std::getenv("UCX_NET_DEVICES") == nullptr) {
    if (std::string dev = InterfaceOf(ListenIp(options)); !dev.empty()) {
      s = modify("NET_DEVICES", dev);
    }
  }
  if (s.ok() && tcp_only && options.rndv_thresh_bytes > 0 &&
      std::getenv("UCX_RNDV_THRESH") == nullptr) {
    s = modify("RNDV_THRESH", absl::StrCat(options.rndv_thresh_bytes));
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
  return Listen(options);
}

absl::Status UcxWorkerImpl::Listen(const UcxOptions& options) {
  ucp_address_t* packed = nullptr;
  size_t length = 0;
  ucs_status_t st = ucp_worker_get_address(worker, &packed, &length);
  if (st != UCS_OK) {
    return absl::InternalError(absl::StrCat("ucp_worker_get_address: ", ucs_status_string(st)));
  }
  std::string blob(reinterpret_cast<const char*>(packed), length);
  ucp_worker_release_address(worker, packed);
  {
    std::lock_guard<std::mutex> lock(secret_mu_);
    secret_ = options.job_secret;
  }
  absl::StatusOr<std::unique_ptr<HelloServer>> hello =
      HelloServer::Start(ListenIp(options), std::move(blob), options.job_secret);
  if (!hello.ok()) return hello.status();
  hello_ = *std::move(hello);
  address_ = hello_->address();
  return absl::OkStatus();
}

void UcxWorkerImpl::SetJobSecret(const std::string& secret) {
  {
    std::lock_guard<std::mutex> lock(secret_mu_);
    secret_ = secret;
  }
  if (hello_ != nullptr) hello_->SetSecret(secret);
}

std::string UcxWorkerImpl::job_secret() const {
  std::lock_guard<std::mutex> lock(secret_mu_);
  return secret_;
}

}  // namespace internal

using internal::UcxWorkerImpl;

absl::StatusOr<std::shared_ptr<UcxWorker>> CreateUcxWorker(const UcxOptions& options) {
  auto w = std::make_shared<UcxWorkerImpl>();
  if (absl::Status s = w->Init(options); !s.ok()) return s;
  return std::shared_ptr<UcxWorker>(std::move(w));
}

}  // namespace gradex::transport::ucx
