// The client's own Prometheus metrics, on the agent's registry (served on
// GRADEX_METRICS_PORT with the agent's): buckets by outcome, the dense
// probes, the switches between sparse and dense exchanges of a bucket (never
// slower than dense: each is also logged), the non-finite gradient values
// refused, and the device buckets' path and the bytes they copied over PCIe.
#ifndef GRADEX_SERVICES_CLIENT_CLIENT_METRICS_H_
#define GRADEX_SERVICES_CLIENT_CLIENT_METRICS_H_

#include <cstdint>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace gradex::client {

class ClientMetrics {
 public:
  explicit ClientMetrics(prometheus::Registry& registry);

  prometheus::Counter& buckets_ok;
  prometheus::Counter& buckets_failed;
  prometheus::Counter& dense_probes;
  prometheus::Counter& sparse_probes;
  prometheus::Counter& switches_to_dense;
  prometheus::Counter& switches_to_sparse;
  prometheus::Counter& nonfinite_values;
  prometheus::Counter& device_buckets_staged;    // path: whole-bucket staging
  prometheus::Counter& device_buckets_selected;  // path: device selection
  prometheus::Counter& device_to_host_bytes;
  prometheus::Counter& host_to_device_bytes;
  prometheus::Gauge& device_pool_bytes;  // gradex's private device pool, held
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_CLIENT_METRICS_H_
