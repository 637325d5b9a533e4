// One client rank as a process of its own, for the tests that kill it: the
// options come from the environment (GRADEX_COORDINATOR, GRADEX_TOKEN, RANK,
// WORLD_SIZE), as under torchrun. Runs steps 0..S-1 of client_steps.h's
// rebuilt layout and prints "step N ok" after each; with --stall-at K it
// stops before step K as a trainer stuck in compute, until killed.
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "tests/client/client_steps.h"

int main(int argc, char** argv) {
  using gradex::client::ClientOptions;
  int steps = 0, stall_at = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    int* out = std::strcmp(argv[i], "--steps") == 0      ? &steps
               : std::strcmp(argv[i], "--stall-at") == 0 ? &stall_at
                                                         : nullptr;
    if (out == nullptr || !absl::SimpleAtoi(argv[i + 1], out)) {
      std::fprintf(stderr, "usage: %s --steps S [--stall-at K]\n", argv[0]);
      return 2;
    }
  }
  ClientOptions o = gradex::client::Options(0, 1);  // rank and world from the environment
  if (absl::Status s = gradex::client::ApplyEnvironment(&o); !s.ok()) {
    std::fprintf(stderr, "client_rank: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<gradex::client::Client>> c = gradex::client::Client::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "client_rank: %s\n", std::string(c.status().message()).c_str());
    return 1;
  }
  for (int step = 0; step < steps; ++step) {
    if (step == stall_at) {
      std::printf("stalled before step %d\n", step);
      std::fflush(stdout);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    for (const absl::Status& s :
         gradex::client::RunStep(**c, o.rank, step, gradex::client::kRebuilt).statuses) {
      if (!s.ok()) {
        std::fprintf(stderr, "client_rank: step %d: %s\n", step, std::string(s.message()).c_str());
        return 1;
      }
    }
    std::printf("step %d ok\n", step);
    std::fflush(stdout);
  }
  return (*c)->Close().ok() ? 0 : 1;
}
