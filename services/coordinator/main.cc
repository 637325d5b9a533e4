// gradex-coordinator: serves one job's control plane until SIGINT/SIGTERM.
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "services/coordinator/flags.h"
#include "services/coordinator/job_config.h"
#include "services/coordinator/server.h"
#include "version/version.h"

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gradex-coordinator: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "gradex-coordinator")) return 0;
  using namespace gradex::coordinator;
  absl::StatusOr<Flags> flags = ParseFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    return Fail(std::string(flags.status().message()) + " (see --help)");
  }
  if (flags->help) {
    std::fputs(Usage(), stdout);
    return 0;
  }
  absl::StatusOr<JobSettings> job = LoadJobConfig(flags->job_config);
  if (!job.ok()) return Fail(std::string(job.status().message()));
  ServerOptions opts;
  opts.listen = flags->listen;
  opts.insecure_listen_any = flags->insecure_listen_any;
  opts.tls = {flags->tls_cert, flags->tls_key, flags->client_ca};
  opts.metrics_port = flags->metrics_port;
  if (!flags->token_file.empty()) {
    absl::StatusOr<std::string> token = LoadToken(flags->token_file);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    opts.token = *token;
  }
  // Every agent holds a connection: take the descriptors the hard limit
  // allows (a soft limit of 1024 is common). The listener keeps a reserve
  // under whatever limit holds (accept_guard.h).
  if (rlimit lim = {}; getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, rlim_t{1} << 20);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  // Signals are taken by sigwait below, not by whichever thread they hit.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(*job, opts);
  if (!server.ok()) return Fail(std::string(server.status().message()));
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "gradex-coordinator: signal %d, shutting down\n", sig);
  (*server)->Shutdown();
  return 0;
}
