#include "services/client/client_metrics.h"

namespace gradex::client {
namespace {

prometheus::Family<prometheus::Counter>& Family(prometheus::Registry& r, const char* name,
                                                const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

// The families with several label values: each registered once per value,
// always with the same help (prometheus-cpp returns the one family).
constexpr char kBuckets[] = "Buckets exchanged, by outcome";
constexpr char kSwitches[] =
    "A bucket's exchange switched between sparse and dense (outside the probes), by the kind it "
    "switched to";
constexpr char kDeviceBuckets[] =
    "Memory::kDevice buckets, by the path their data took to the exchange";
constexpr char kDeviceBytes[] = "Bytes Memory::kDevice buckets copied over PCIe, by direction";

}  // namespace

ClientMetrics::ClientMetrics(prometheus::Registry& r)
    : buckets_ok(Family(r, "gradex_client_buckets_total", kBuckets).Add({{"outcome", "ok"}})),
      buckets_failed(
          Family(r, "gradex_client_buckets_total", kBuckets).Add({{"outcome", "failed"}})),
      dense_probes(Family(r, "gradex_client_dense_probes_total",
                          "Buckets run dense to time them against their sparse exchange")
                       .Add({})),
      sparse_probes(Family(r, "gradex_client_sparse_probes_total",
                           "Warm-up steps that timed a bucket's sparse exchange beside its dense "
                           "one (start_iter with dense probes on)")
                        .Add({})),
      switches_to_dense(
          Family(r, "gradex_client_algorithm_switches_total", kSwitches).Add({{"to", "dense"}})),
      switches_to_sparse(
          Family(r, "gradex_client_algorithm_switches_total", kSwitches).Add({{"to", "sparse"}})),
      nonfinite_values(Family(r, "gradex_client_nonfinite_values_total",
                              "NaN or infinite gradient values refused (exchanged as 0)")
                           .Add({})),
      device_buckets_staged(Family(r, "gradex_client_device_buckets_total", kDeviceBuckets)
                                .Add({{"path", "whole_bucket_staging"}})),
      device_buckets_selected(Family(r, "gradex_client_device_buckets_total", kDeviceBuckets)
                                  .Add({{"path", "device_selection"}})),
      device_to_host_bytes(Family(r, "gradex_client_device_copy_bytes_total", kDeviceBytes)
                               .Add({{"direction", "device_to_host"}})),
      host_to_device_bytes(Family(r, "gradex_client_device_copy_bytes_total", kDeviceBytes)
                               .Add({{"direction", "host_to_device"}})),
      device_pool_bytes(prometheus::BuildGauge()
                            .Name("gradex_client_device_pool_bytes")
                            .Help("Bytes gradex's private device memory pool holds (outside the "
                                  "trainer's allocator), at the last device bucket's end")
                            .Register(r)
                            .Add({})) {}

}  // namespace gradex::client
