#include "agent/faults/stall_entry_fault.h"

#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gradex::agent::faults {
namespace {

// The member floor's provider interface these wrap.
using member::ConnectHooks;
using member::ForwardingProvider;
using member::Plan;

class StallingProvider final : public ForwardingProvider {
 public:
  StallingProvider(std::unique_ptr<member::TransportProvider> inner, int entry,
                   std::chrono::milliseconds at_most)
      : ForwardingProvider(std::move(inner)), entry_(entry), at_most_(at_most) {}
  absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(
      const Plan& plan, int rank, const ConnectHooks& hooks) override {
    if (++connects_ != entry_) return inner().Connect(plan, rank, hooks);
    std::cerr << "gradex-agent: --debug-stall-entry: staying out of epoch " << plan.epoch
              << "'s wire-up (rank " << rank << ") for up to " << at_most_.count() << " ms"
              << std::endl;
    const transport::Deadline until = transport::DeadlineIn(at_most_);
    while (transport::Clock::now() < until) {
      if (hooks.abandon && hooks.abandon()) {
        return absl::AbortedError(absl::StrCat("rank ", rank, ": stalled wire-up of epoch ",
                                               plan.epoch,
                                               " abandoned (superseded; --debug-stall-entry)"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return absl::UnavailableError(absl::StrCat("rank ", rank, ": stayed out of epoch ", plan.epoch,
                                               "'s wire-up for ", at_most_.count(),
                                               " ms (--debug-stall-entry)"));
  }

 private:
  const int entry_;
  const std::chrono::milliseconds at_most_;
  int connects_ = 0;
};

}  // namespace

std::unique_ptr<member::TransportProvider> StallEntryFault(
    std::unique_ptr<member::TransportProvider> inner, int entry,
    std::chrono::milliseconds at_most) {
  return std::make_unique<StallingProvider>(std::move(inner), entry, at_most);
}

}  // namespace gradex::agent::faults
