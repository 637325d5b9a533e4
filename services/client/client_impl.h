// The Client behind Client::Create: coordinator discovery (embedded or
// given), the agent runtime over the gRPC control plane and a UCX worker,
// and the bucket pipeline (pipeline/bucket_pipeline.h) that owns every
// bucket's state and threads. What stays here is what a trainer sees: the
// options, the stats and timeline of each bucket (recorded as the pipeline
// reports them), checkpoints and Close. The trainer's thread only queues
// (AllreduceAsync) and waits (Flush).
#ifndef GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_
#define GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "member/control_plane.h"
#include "member/transport_provider.h"
#include "pipeline/agent.h"
#include "pipeline/agent_metrics.h"
#include "pipeline/bucket_pipeline.h"
#include "services/client/client.h"
#include "services/client/client_metrics.h"
#include "services/client/embedded_coordinator.h"
#include "services/client/timeline.h"

namespace gradex::client {

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(ClientOptions options, device::Backend* device = nullptr);
  ~ClientImpl() override;

  // Finds or starts the coordinator, joins it, starts the progress thread.
  absl::Status Start(const Rendezvous& rendezvous);

  void AllreduceAsync(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                      bool last_in_step, Done done, uintptr_t stream = 0) override;
  using Client::AllreduceAsync;
  absl::Status Flush() override;
  std::vector<BucketStats> Stats() const override;
  int rank() const override { return rank_.load(); }
  int world_size() const override { return world_.load(); }
  uint64_t step() const override { return step_.load(); }
  std::string coordinator() const override { return endpoint_.address; }
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status LoadState(std::string_view state) override;
  absl::Status Close() override;

  // The agent's registry, with the client's metrics on it (tests read it).
  const pipeline::AgentMetrics& metrics() const { return *metrics_; }

 private:
  using TimePoint = std::chrono::system_clock::time_point;
  // Per layout: recent exchange times, for the medians in BucketStats.
  struct History {
    std::deque<double> sparse_s, dense_s;
    bool last_dense = false;
    bool any = false;
    bool staging_logged = false;  // whole-bucket staging was logged for this layout
  };
  // The exchange (hierarchical or flat) rank 0 last printed.
  std::string exchange_logged_;

  // Stats, metrics and timeline of a bucket that ended (the pipeline's
  // observer, on its progress thread).
  void Record(const pipeline::BucketEnd& end);

  const ClientOptions options_;
  device::Backend* const device_;  // null: the default backend
  CoordinatorEndpoint endpoint_;   // owns the embedded coordinator, if any
  std::unique_ptr<member::ControlPlane> control_;
  std::unique_ptr<member::TransportProvider> transports_;
  std::unique_ptr<pipeline::AgentMetrics> metrics_;
  std::unique_ptr<ClientMetrics> client_metrics_;
  std::unique_ptr<pipeline::Agent> agent_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<pipeline::BucketPipeline> pipeline_;  // stops before the agent goes
  absl::Mutex close_mu_;
  bool closed_ ABSL_GUARDED_BY(close_mu_) = false;

  mutable absl::Mutex stats_mu_;
  std::map<std::vector<std::pair<uint64_t, size_t>>, BucketStats> stats_ ABSL_GUARDED_BY(stats_mu_);
  std::map<std::vector<std::pair<uint64_t, size_t>>, History> history_ ABSL_GUARDED_BY(stats_mu_);

  std::atomic<int> rank_{-1};
  std::atomic<int> world_{0};
  std::atomic<uint64_t> step_{0};
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_
