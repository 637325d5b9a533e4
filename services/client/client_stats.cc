// The client's per-layout statistics (Client::Stats), metrics and timeline
// events, recorded as the bucket pipeline reports each bucket's end (on its
// progress thread).
#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "catalog/catalog.h"
#include "catalog/median.h"
#include "collectives/algorithms/hierarchical.h"
#include "services/client/client_impl.h"

namespace gradex::client {
namespace {

constexpr size_t kWindow = 16;  // recent exchanges behind each median

void Push(std::deque<double>& d, double v) {
  d.push_back(v);
  if (d.size() > kWindow) d.pop_front();
}

std::string SpanKeys(const std::vector<ParamSpan>& spans) {
  return absl::StrJoin(spans, ",",
                       [](std::string* o, const ParamSpan& s) { absl::StrAppend(o, s.key); });
}

}  // namespace

void ClientImpl::Record(const pipeline::BucketEnd& end) {
  rank_.store(agent_->connected() ? agent_->rank() : -1);
  if (const member::Plan* p = agent_->plan()) world_.store(p->world());
  step_.store(agent_->next_step());
  if (end.nonfinite > 0) {
    client_metrics_->nonfinite_values.Increment(static_cast<double>(end.nonfinite));
  }
  if (end.device_path == pipeline::DevicePath::kWholeBucketStaging) {
    client_metrics_->device_buckets_staged.Increment();
  } else if (end.device_path == pipeline::DevicePath::kDeviceSelection) {
    client_metrics_->device_buckets_selected.Increment();
  }
  if (end.device_to_host_bytes > 0) {
    client_metrics_->device_to_host_bytes.Increment(static_cast<double>(end.device_to_host_bytes));
  }
  if (end.host_to_device_bytes > 0) {
    client_metrics_->host_to_device_bytes.Increment(static_cast<double>(end.host_to_device_bytes));
  }
  if (end.device_path != pipeline::DevicePath::kHost) {
    client_metrics_->device_pool_bytes.Set(static_cast<double>(end.device_pool_bytes));
  }
  const absl::Status& status = end.status;
  const pipeline::BucketOutcome& out = end.outcome;
  const uint64_t step = end.step;
  if (timeline_ != nullptr) {
    auto secs = [](TimePoint a, TimePoint b) {
      return std::max(0.0, std::chrono::duration<double>(b - a).count());
    };
    // The selection thread's row (tid 1): the wait in the queue, then the
    // call's local part. The progress thread's (tid 0): the wait for the
    // previous bucket's exchange, the exchange, and inside it its
    // communication and reduction (phase totals laid end to end).
    std::vector<Timeline::Span> spans;
    spans.push_back({"queue", end.queued, secs(end.queued, end.select_start), 1});
    spans.push_back({"selection", end.select_start, secs(end.select_start, end.select_end), 1});
    spans.push_back({"wait", end.select_end, secs(end.select_end, end.exchange_start), 0});
    if (status.ok()) {
      spans.push_back({"exchange", end.exchange_start, secs(end.exchange_start, end.end), 0});
      auto at = end.exchange_start;
      for (auto [name, s] : {std::pair{"communication", out.stats.phases.communication_s},
                             {"reduction", out.stats.phases.reduction_s}}) {
        spans.push_back({name, at, s, 0});
        at += std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::duration<double>(s));
      }
    } else {
      spans.push_back({"failed", end.exchange_start, secs(end.exchange_start, end.end), 0});
    }
    timeline_->Bucket(spans, step, end.index, out.algorithm, end.elements);
  }
  (status.ok() ? client_metrics_->buckets_ok : client_metrics_->buckets_failed).Increment();
  if (!status.ok() && out.algorithm.empty()) return;  // never ran
  std::vector<std::pair<uint64_t, size_t>> key;
  for (const ParamSpan& s : end.spans) key.emplace_back(s.key, s.elements);
  const bool dense = catalog::TraitsOf(out.algorithm).dense;
  absl::MutexLock lock(&stats_mu_);
  BucketStats& b = stats_[key];
  History& h = history_[key];
  if (end.device_path == pipeline::DevicePath::kWholeBucketStaging && !h.staging_logged) {
    // Once per bucket layout: no device local part yet, so the whole bucket
    // crosses PCIe twice a step and is selected on the host.
    h.staging_logged = true;
    std::fprintf(stderr,
                 "gradex: device bucket of spans [%s] (%zu elements): whole-bucket staging, "
                 "%zu bytes to the host and back each step, selected on the host\n",
                 SpanKeys(end.spans).c_str(), end.elements, end.elements * sizeof(float));
  }
  b.spans = end.spans;
  b.elements = end.elements;
  b.algorithm = out.algorithm;
  if (const member::Plan* p = agent_->plan()) b.density = dense ? 1.0 : p->density;
  ++b.calls;
  b.dense_calls += dense;
  if (out.dense_probe) client_metrics_->dense_probes.Increment();
  if (out.sparse_probe) client_metrics_->sparse_probes.Increment();
  // A switch between sparse and dense: the rules or the bucket controller
  // chose the other kind for this bucket (a probe runs beside the bucket's
  // own exchange and changes neither).
  if (h.any && h.last_dense != dense) {
    ++b.fallback_switches;
    (dense ? client_metrics_->switches_to_dense : client_metrics_->switches_to_sparse).Increment();
    std::fprintf(stderr, "gradex: bucket of spans [%s] switched to %s at step %llu\n",
                 SpanKeys(end.spans).c_str(), out.algorithm.c_str(),
                 static_cast<unsigned long long>(step));
  }
  h.last_dense = dense;
  h.any = true;
  b.sent_bytes = out.stats.sent_bytes;
  b.recv_bytes = out.stats.recv_bytes;
  b.last_s = out.seconds;
  if (status.ok()) Push(dense ? h.dense_s : h.sparse_s, out.seconds);
  if (status.ok() && out.dense_probe) Push(h.dense_s, out.probe_seconds);
  if (status.ok() && out.sparse_probe) Push(h.sparse_s, out.probe_seconds);
  b.sparse_s = catalog::UpperMedian(h.sparse_s);
  b.dense_s = catalog::UpperMedian(h.dense_s);
  b.residual_norm = end.residual_l2;
  b.threshold_reuse_hits += static_cast<uint64_t>(out.stats.Detail("topk_reuse_hits"));
  b.threshold_reuse_misses += static_cast<uint64_t>(out.stats.Detail("topk_reuse_misses"));
  b.device_path = pipeline::DevicePathName(end.device_path);
  b.device_to_host_bytes = end.device_to_host_bytes;
  b.host_to_device_bytes = end.host_to_device_bytes;
  b.device_waits = end.device_waits;
  b.device_syncs = end.device_syncs;
  b.device_allocations = end.device_allocations;
  b.device_pool_bytes = end.device_pool_bytes;
  b.exchange = out.exchange;
  b.intra_node_bytes =
      static_cast<uint64_t>(out.stats.Detail(collectives::algorithms::kDetailIntraNodeSentBytes));
  b.inter_node_bytes =
      static_cast<uint64_t>(out.stats.Detail(collectives::algorithms::kDetailInterNodeSentBytes));
  b.intra_node_s = out.stats.Detail(collectives::algorithms::kDetailIntraNodeSeconds);
  b.inter_node_s = out.stats.Detail(collectives::algorithms::kDetailInterNodeSeconds);
  if (!b.exchange.empty() && b.exchange != exchange_logged_) {
    // Rank 0's one line (and again when an epoch changes it): which
    // exchange runs, so a user sees the node layout gradex found.
    exchange_logged_ = b.exchange;
    if (agent_->rank() == 0) {
      std::fprintf(stderr, "gradex: exchange %s%s\n", b.exchange.c_str(),
                   absl::StartsWith(b.exchange, "hierarchical")
                       ? ": dense inside each node, the algorithm across nodes on 1/L of a bucket"
                       : "");
    }
  }
}

std::vector<BucketStats> ClientImpl::Stats() const {
  absl::MutexLock lock(&stats_mu_);
  std::vector<BucketStats> out;
  for (const auto& [key, b] : stats_) out.push_back(b);
  return out;
}

}  // namespace gradex::client
