// gradex-coordinator-load: how many agents one coordinator sustains. Starts a
// coordinator in this process, joins --agents simulated agents over loopback
// gRPC and heartbeats each at a third of the lease for --seconds; prints join
// throughput and heartbeat latency. Exit 1 when an agent that kept
// heartbeating was evicted or a call failed, or when the --silent agents
// (never heartbeat) were not exactly the ones evicted.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "bench/coordinator_load/load.h"
#include "version/version.h"

namespace {

constexpr char kUsage[] =
    "usage: gradex-coordinator-load [--agents N=10000] [--seconds S=30] [--lease-ms L=10000]\n"
    "                               [--channels C=8] [--join-in-flight J=256] [--silent K=0]\n";

bool IntFlag(const std::string& arg, const char* name, char* next, int* out, int* i) {
  if (arg != name) return false;
  if (next == nullptr || !absl::SimpleAtoi(next, out)) {
    std::fprintf(stderr, "%s needs an integer\n%s", name, kUsage);
    std::exit(2);
  }
  ++*i;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-coordinator-load")) return 0;
  gradex::bench::LoadOptions o;
  int seconds = 30, lease_ms = 10000;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (IntFlag(a, "--agents", next, &o.agents, &i) ||
        IntFlag(a, "--seconds", next, &seconds, &i) ||
        IntFlag(a, "--lease-ms", next, &lease_ms, &i) ||
        IntFlag(a, "--channels", next, &o.channels, &i) ||
        IntFlag(a, "--join-in-flight", next, &o.join_in_flight, &i) ||
        IntFlag(a, "--silent", next, &o.silent, &i)) {
      continue;
    }
    std::fprintf(stderr, "unknown flag %s\n%s", a.c_str(), kUsage);
    return 2;
  }
  if (seconds < 1 || lease_ms < 100) {
    std::fprintf(stderr, "--seconds >= 1, --lease-ms >= 100\n");
    return 2;
  }
  o.duration = absl::Seconds(seconds);
  o.lease = absl::Milliseconds(lease_ms);
  std::printf("%d agents (%d silent), lease %d ms, heartbeat every %d ms, %d s, %d channels\n",
              o.agents, o.silent, lease_ms, lease_ms / 3, seconds, o.channels);
  std::fflush(stdout);
  auto r = gradex::bench::RunCoordinatorLoad(o);
  if (!r.ok()) {
    std::fprintf(stderr, "gradex-coordinator-load: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  std::fputs(r->ToString().c_str(), stdout);
  bool ok = r->joined == o.agents && r->heartbeats_failed == 0 &&
            r->evictions == static_cast<uint64_t>(o.silent) &&
            r->members_at_end == static_cast<size_t>(o.agents - o.silent) &&
            r->max_gap_over_lease < 1.0 && r->heartbeats_ok > 0;
  std::printf("%s\n", ok ? "PASS: every heartbeating agent kept its lease"
                         : "FAIL: an agent lost its lease, a call failed, or evictions != silent");
  return ok ? 0 : 1;
}
