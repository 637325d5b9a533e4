// The Client behind Client::Create: the agent runtime (services/agent) over
// the gRPC control plane and a UCX worker, driven by one progress thread that
// takes queued buckets in the order issued. The trainer's thread only queues
// (AllreduceAsync) and waits (Flush); every exchange, residual and epoch
// change happens on the progress thread, so the agent needs no locking.
#ifndef GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_
#define GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/agent/agent.h"
#include "services/agent/agent_metrics.h"
#include "services/agent/control_plane.h"
#include "services/agent/transport_provider.h"
#include "services/client/client.h"
#include "services/client/client_metrics.h"
#include "services/client/device_staging.h"
#include "services/client/embedded_coordinator.h"
#include "services/client/residual_store.h"
#include "services/client/timeline.h"

namespace gradex::client {

class ClientImpl final : public Client {
 public:
  explicit ClientImpl(ClientOptions options);
  ~ClientImpl() override;

  // Finds or starts the coordinator, joins it, starts the progress thread.
  absl::Status Start(const Rendezvous& rendezvous);

  void AllreduceAsync(std::vector<ParamSpan> spans, std::span<float> data, Memory memory,
                      bool last_in_step, Done done) override;
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
  const agent::AgentMetrics& metrics() const { return *metrics_; }

 private:
  struct Item {
    std::vector<ParamSpan> spans;
    std::span<float> data;
    Memory memory = Memory::kHost;
    bool last_in_step = false;
    Done done;
    std::chrono::system_clock::time_point queued;
  };
  // Per layout: recent exchange times, for the medians in BucketStats.
  struct History {
    std::deque<double> sparse_s, dense_s;
    bool last_dense = false;
    bool any = false;
  };

  void Loop();
  // Runs one bucket on the progress thread (state_mu_ held).
  absl::Status Process(Item& item, agent::BucketOutcome* out, uint32_t* index,
                       agent::BucketSlot** slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  absl::Status Exchange(Item& item, std::span<float> host, agent::BucketOutcome* out,
                        uint32_t* index, agent::BucketSlot** slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // Stats and timeline of a bucket that ended (progress thread).
  void Record(const Item& item, const agent::BucketOutcome& out, const absl::Status& status,
              uint64_t step, uint32_t index, double residual_l2,
              std::chrono::system_clock::time_point start);
  // Keeps a bucket that never ran in its residual (Close's queue).
  void KeepUnrun(Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);

  const ClientOptions options_;
  CoordinatorEndpoint endpoint_;  // owns the embedded coordinator, if any
  std::unique_ptr<agent::ControlPlane> control_;
  std::unique_ptr<agent::TransportProvider> transports_;
  std::unique_ptr<agent::AgentMetrics> metrics_;
  std::unique_ptr<ClientMetrics> client_metrics_;
  std::unique_ptr<agent::Agent> agent_;
  std::unique_ptr<Timeline> timeline_;
  DeviceStaging staging_;

  // The progress thread's state; SaveState/LoadState take it between buckets.
  mutable absl::Mutex state_mu_;
  ResidualStore residuals_ ABSL_GUARDED_BY(state_mu_);
  std::vector<size_t> step_sizes_ ABSL_GUARDED_BY(state_mu_);  // this step's buckets so far
  std::vector<size_t> last_sizes_ ABSL_GUARDED_BY(state_mu_);  // the last step's

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ = false;

  mutable absl::Mutex stats_mu_;
  std::map<std::vector<std::pair<uint64_t, size_t>>, BucketStats> stats_ ABSL_GUARDED_BY(stats_mu_);
  std::map<std::vector<std::pair<uint64_t, size_t>>, History> history_ ABSL_GUARDED_BY(stats_mu_);

  std::atomic<int> rank_{-1};
  std::atomic<int> world_{0};
  std::atomic<uint64_t> step_{0};
  std::thread worker_;
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_
