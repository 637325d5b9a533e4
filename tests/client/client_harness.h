// What the in-process client tests share: clients as threads of one
// process, rank 0 with the embedded coordinator found through an in-memory
// rendezvous, and the counters of a client's metrics registry.
#ifndef GRADEX_TESTS_CLIENT_CLIENT_HARNESS_H_
#define GRADEX_TESTS_CLIENT_CLIENT_HARNESS_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prometheus/registry.h"
#include "services/client/client.h"
#include "services/client/client_impl.h"
#include "tests/client/client_steps.h"
#include "tests/client/memory_rendezvous.h"

namespace gradex::client {

inline std::vector<std::unique_ptr<Client>> MakeClients(
    int world, testing::MemoryStore& store,
    const std::function<void(ClientOptions&)>& edit = nullptr, device::Backend* device = nullptr) {
  std::vector<std::unique_ptr<Client>> clients(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      ClientOptions o = Options(r, world);
      if (edit) edit(o);
      absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(o, store.rendezvous(), device);
      ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
      clients[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  return clients;
}

// A counter of the client's metrics registry (0 when absent).
inline double Counter(const Client& c, const std::string& name, const std::string& label = "",
                      const std::string& value = "") {
  const auto& impl = dynamic_cast<const ClientImpl&>(c);
  for (const prometheus::MetricFamily& f : impl.metrics().registry()->Collect()) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      bool match = label.empty();
      for (const prometheus::ClientMetric::Label& l : m.label) {
        match |= l.name == label && l.value == value;
      }
      if (match) return m.counter.value;
    }
  }
  return 0;
}

}  // namespace gradex::client

#endif  // GRADEX_TESTS_CLIENT_CLIENT_HARNESS_H_
