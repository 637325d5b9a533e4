// Loopback communicators for agents that run as threads of one test: one
// fabric per epoch, created by the first agent that connects to it.
#ifndef GRADEX_TESTS_AGENT_LOOPBACK_PROVIDER_H_
#define GRADEX_TESTS_AGENT_LOOPBACK_PROVIDER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "member/transport_provider.h"
#include "pipeline/agent.h"
#include "transport/loopback_transport.h"

namespace gradex::testing {

class LoopbackPool {
 public:
  absl::StatusOr<std::unique_ptr<transport::Transport>> Take(const member::Plan& plan, int rank) {
    absl::MutexLock lock(&mu_);
    auto& fabric = fabrics_[plan.epoch];
    if (fabric.empty()) fabric = transport::CreateLoopbackTransports(plan.world());
    if (rank < 0 || rank >= static_cast<int>(fabric.size()) || fabric[rank] == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("loopback: rank ", rank, " of epoch ", plan.epoch, " unavailable"));
    }
    return std::move(fabric[rank]);
  }

 private:
  absl::Mutex mu_;
  std::map<uint32_t, std::vector<std::unique_ptr<transport::Transport>>> fabrics_
      ABSL_GUARDED_BY(mu_);
};

class LoopbackProvider final : public member::TransportProvider {
 public:
  LoopbackProvider(LoopbackPool* pool, std::string address)
      : pool_(pool), address_(std::move(address)) {}
  std::string address() const override { return address_; }
  // Connects at once: nothing to abandon.
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const member::Plan& plan, int rank, const member::ConnectHooks&) override {
    return pool_->Take(plan, rank);
  }

 private:
  LoopbackPool* pool_;
  std::string address_;
};

// An agent of job "job" (token "token") on host "localhost" with id `id`,
// and join/sync timeouts far past any test's own bounds: what every agent
// test starts from before it sets its own fields (elements, rules, ...).
inline pipeline::AgentOptions TestAgentOptions(const std::string& id) {
  pipeline::AgentOptions o;
  o.job = "job";
  o.token = "token";
  o.agent_id = id;
  o.host = "localhost";
  o.join_timeout = std::chrono::milliseconds(20000);
  o.sync_timeout = std::chrono::milliseconds(10000);
  return o;
}

}  // namespace gradex::testing

#endif  // GRADEX_TESTS_AGENT_LOOPBACK_PROVIDER_H_
