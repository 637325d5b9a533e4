// An in-memory rendezvous store for clients that run as threads of one test
// (torch's c10d store in a real job): set publishes, get waits up to a bound.
#ifndef GRADEX_TESTS_CLIENT_MEMORY_RENDEZVOUS_H_
#define GRADEX_TESTS_CLIENT_MEMORY_RENDEZVOUS_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/client/client.h"

namespace gradex::client::testing {

class MemoryStore {
 public:
  explicit MemoryStore(std::chrono::milliseconds wait = std::chrono::seconds(20)) : wait_(wait) {}
  Rendezvous rendezvous() {
    Rendezvous r;
    r.set = [this](const std::string& k, const std::string& v) {
      absl::MutexLock lock(&mu_);
      values_[k] = v;
      return absl::OkStatus();
    };
    r.get = [this](const std::string& k) -> absl::StatusOr<std::string> {
      absl::MutexLock lock(&mu_);
      auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return values_.count(k) > 0; };
      if (!mu_.AwaitWithTimeout(absl::Condition(&has), absl::FromChrono(wait_))) {
        return absl::DeadlineExceededError(absl::StrCat("store: no '", k, "'"));
      }
      return values_[k];
    };
    return r;
  }

 private:
  const std::chrono::milliseconds wait_;
  absl::Mutex mu_;
  std::map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradex::client::testing

#endif  // GRADEX_TESTS_CLIENT_MEMORY_RENDEZVOUS_H_
