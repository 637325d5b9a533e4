// The Client behind Client::Create: the agent runtime (services/agent) over
// the gRPC control plane and a UCX worker, driven by two threads that take
// queued buckets in the order issued: the selection thread gathers a
// bucket's residual and runs its call's local part (the agent's PlanBucket /
// PrepareBucket: gradient into the residual, local selection) and hands it
// to the progress thread, which exchanges the buckets in order
// (ExchangeBucket), ends steps and runs `done`. The selection thread
// prepares bucket b+1 while the progress thread exchanges bucket b, never
// further ahead, and opens a step (BeginStep) only when the progress thread
// is idle, so the agent is never entered by both threads but through the
// per-bucket calls agent.h allows. The trainer's thread only queues
// (AllreduceAsync) and waits (Flush).
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
  using TimePoint = std::chrono::system_clock::time_point;
  struct Item {
    std::vector<ParamSpan> spans;
    std::span<float> data;
    Memory memory = Memory::kHost;
    bool last_in_step = false;
    Done done;
    TimePoint queued;
    // Filled by the selection thread.
    std::unique_ptr<agent::BucketCall> call;  // null: it never reached the agent (see status)
    absl::Status status;                      // why not (call null), or the non-finite refusal
    std::span<float> host;                    // what is exchanged: data, or a staging buffer
    int staging = -1;                         // which staging buffer (device buckets)
    uint64_t step = 0;
    uint32_t index = 0;
    TimePoint select_start, select_end, exchange_start;
  };
  // Per layout: recent exchange times, for the medians in BucketStats.
  struct History {
    std::deque<double> sparse_s, dense_s;
    bool last_dense = false;
    bool any = false;
  };

  // The selection thread: takes queued buckets, Select()s them, hands them
  // to the progress thread (ready_).
  void SelectLoop();
  // The progress thread: exchanges the handed buckets in order.
  void ExchangeLoop();
  // One bucket's first half (selection thread, state_mu_ held): checks,
  // staging, residual, step opening, PlanBucket and PrepareBucket.
  void Select(Item& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);
  // Waits until the progress thread has taken the previous bucket and, when
  // `idle`, finished it too; the bucket it is exchanging must not use any
  // of `touched` (the slots the next bucket's gathering would touch).
  void WaitTurn(bool idle, const std::vector<const agent::BucketSlot*>& touched);
  // One bucket's second half (progress thread): the exchange and its result.
  absl::Status Finish(Item& item, agent::BucketOutcome* out);
  // Stats and timeline of a bucket that ended (progress thread).
  void Record(const Item& item, const agent::BucketOutcome& out, const absl::Status& status,
              double residual_l2, TimePoint end);
  // Waits (up to the timeout) until no bucket is queued or in flight.
  absl::Status AwaitIdle() const;
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
  // Two: the bucket being prepared and the one exchanging may both be on a
  // device.
  DeviceStaging staging_[2];

  // The progress thread's state; SaveState/LoadState take it between buckets.
  mutable absl::Mutex state_mu_;
  ResidualStore residuals_ ABSL_GUARDED_BY(state_mu_);
  std::vector<size_t> step_sizes_ ABSL_GUARDED_BY(state_mu_);  // this step's buckets so far
  std::vector<size_t> last_sizes_ ABSL_GUARDED_BY(state_mu_);  // the last step's
  bool step_open_ ABSL_GUARDED_BY(state_mu_) = false;  // the selection thread's view of the step
  int next_staging_ ABSL_GUARDED_BY(state_mu_) = 0;

  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> ready_ ABSL_GUARDED_BY(mu_);   // selected, not yet exchanging (at most one)
  bool exchanging_ ABSL_GUARDED_BY(mu_) = false;  // the progress thread holds a bucket
  const agent::BucketSlot* exchanging_slot_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool selector_done_ ABSL_GUARDED_BY(mu_) = false;
  int running_ ABSL_GUARDED_BY(mu_) = 0;  // taken from queue_, `done` not yet run
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ = false;

  mutable absl::Mutex stats_mu_;
  std::map<std::vector<std::pair<uint64_t, size_t>>, BucketStats> stats_ ABSL_GUARDED_BY(stats_mu_);
  std::map<std::vector<std::pair<uint64_t, size_t>>, History> history_ ABSL_GUARDED_BY(stats_mu_);

  std::atomic<int> rank_{-1};
  std::atomic<int> world_{0};
  std::atomic<uint64_t> step_{0};
  std::thread worker_;    // the progress thread
  std::thread selector_;  // the selection thread
};

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_CLIENT_IMPL_H_
