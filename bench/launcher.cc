#include "bench/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/fault_transport.h"
#include "bench/rank_runner.h"
#include "member/data_interface.h"
#include "transport/file_bootstrap.h"
#include "transport/loopback_transport.h"
#include "transport/ucx/ucx_transport.h"

namespace gradex::bench {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void OnSignal(int) { g_interrupted = 1; }

class DoneCounter {
 public:
  DoneCounter(int ranks, const AlgoDone& done) : ranks_(ranks), done_(done) {}
  void Add(const std::string& algo) {
    if (++count_[algo] == ranks_ && done_) done_(algo);
  }

 private:
  int ranks_;
  const AlgoDone& done_;
  std::map<std::string, int> count_;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;  // read end of the report pipe; -1 once closed
  std::string buffer;
  bool exited = false;
  int status = 0;
  bool killed = false;  // by us, at a deadline
};

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "gradex-bench";
  return std::string(buf, n);
}

bool WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = write(fd, s.data() + off, s.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += size_t(w);
  }
  return true;
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)),
                        ")");
  }
  return absl::StrCat("exited with status ", WEXITSTATUS(status));
}

bool Abnormal(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

}  // namespace

LaunchResult LaunchProcesses(const BenchFlags& flags, const std::vector<std::string>& algos,
                             int argc, char** argv, const AlgoDone& done) {
  LaunchResult result;
  const int p = flags.ranks;
  char tmpl[] = "/tmp/gradex-bench-XXXXXX";
  if (!mkdtemp(tmpl)) {
    result.problems.push_back(absl::StrCat("mkdtemp: ", strerror(errno)));
    return result;
  }
  const std::string boot_dir = tmpl;
  const std::string exe = SelfExe();

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  // %n in --rank-wrapper: the rank's node (e.g. one network namespace a node).
  const catalog::NodeLayout layout = LayoutFor(flags);
  std::vector<Child> children(p);
  for (int r = 0; r < p; ++r) {
    Child& c = children[r];
    c.rank = r;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      result.problems.push_back(absl::StrCat("pipe: ", strerror(errno)));
      c.exited = true;
      continue;
    }
    std::vector<std::string> args;
    for (absl::string_view w : absl::StrSplit(flags.rank_wrapper, ' ', absl::SkipWhitespace())) {
      args.push_back(absl::StrReplaceAll(
          w, {{"%d", absl::StrCat(r)}, {"%n", absl::StrCat(layout.node_of[r])}}));
    }
    args.push_back(exe);
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.insert(args.end(), {"--rank", absl::StrCat(r), "--bootstrap-dir", boot_dir, "--report-fd",
                             absl::StrCat(fds[1])});
    std::vector<char*> cargv;
    for (auto& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);

    pid_t pid = fork();
    if (pid == 0) {
      // Own process group, so a deadline kill also reaches what a wrapper forks.
      setpgid(0, 0);
      // If the launcher dies, nobody would collect or kill the ranks.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      fcntl(fds[1], F_SETFD, 0);  // keep the write end across exec
      // Ranks report through the pipe; UCX logs to stdout by default, which
      // must not mix into the launcher's table or JSON.
      dup2(STDERR_FILENO, STDOUT_FILENO);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      execvp(cargv[0], cargv.data());
      std::fprintf(stderr, "gradex-bench: cannot exec %s: %s\n", cargv[0], strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
      result.problems.push_back(absl::StrCat("fork: ", strerror(errno)));
      close(fds[0]);
      c.exited = true;
      continue;
    }
    setpgid(pid, pid);  // also here: no race with the child's own call
    c.pid = pid;
    c.fd = fds[0];
  }

  DoneCounter counter(p, done);
  const auto overall = transport::Clock::now() + std::chrono::seconds(flags.timeout_s);
  auto deadline = overall;
  bool grace_set = false;
  // After a rank dies the others must fail their current wait by then.
  const auto grace =
      std::chrono::milliseconds(std::max(flags.deadline_ms, flags.connect_timeout_ms) + 10'000);

  auto consume = [&](Child& c) {
    size_t pos;
    while ((pos = c.buffer.find('\n')) != std::string::npos) {
      std::string line = c.buffer.substr(0, pos);
      c.buffer.erase(0, pos + 1);
      auto rep = ParseReport(line);
      if (!rep.ok()) {
        result.problems.push_back(absl::StrCat("rank ", c.rank, ": ", rep.status().message()));
        continue;
      }
      counter.Add(rep->algo);
      result.reports.push_back(*std::move(rep));
    }
  };

  while (true) {
    bool all_done = true;
    for (auto& c : children) all_done = all_done && c.exited && c.fd < 0;
    if (all_done) break;
    const auto now = transport::Clock::now();
    if (now >= deadline || g_interrupted) {
      for (auto& c : children) {
        if (!c.exited && c.pid > 0) {
          kill(-c.pid, SIGKILL);
          kill(c.pid, SIGKILL);
          c.killed = true;
        }
      }
      for (auto& c : children) {
        if (!c.exited && c.pid > 0) {
          waitpid(c.pid, &c.status, 0);
          c.exited = true;
        }
        if (c.fd >= 0) {
          close(c.fd);
          c.fd = -1;
        }
      }
      break;
    }
    std::vector<pollfd> pfds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.fd >= 0) {
        pfds.push_back({c.fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count(), 1, 200));
    int n = poll(pfds.data(), pfds.size(), wait_ms);
    if (n > 0) {
      for (size_t i = 0; i < pfds.size(); ++i) {
        if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[65536];
        ssize_t got = read(pfds[i].fd, buf, sizeof buf);
        if (got > 0) {
          owners[i]->buffer.append(buf, size_t(got));
          consume(*owners[i]);
        } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
          close(owners[i]->fd);
          owners[i]->fd = -1;
        }
      }
    }
    for (auto& c : children) {
      if (c.exited || c.pid <= 0) continue;
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.exited = true;
        if (Abnormal(c.status) && !grace_set) {
          grace_set = true;
          deadline = std::min(overall, transport::Clock::now() + grace);
          if (!flags.quiet) {
            std::fprintf(
                stderr, "[gradex-bench] rank %d %s; waiting up to %lld ms for the others\n", c.rank,
                DescribeExit(c.status).c_str(), static_cast<long long>(grace.count()));
          }
        }
      }
    }
  }

  for (auto& c : children) {
    if (c.pid <= 0) continue;
    if (c.killed) {
      result.problems.push_back(absl::StrCat("rank ", c.rank, " did not finish by the ",
                                             g_interrupted ? "interrupt" : "deadline",
                                             " and was killed"));
    } else if (Abnormal(c.status)) {
      result.problems.push_back(absl::StrCat("rank ", c.rank, " ", DescribeExit(c.status)));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(boot_dir, ec);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (g_interrupted) result.problems.push_back("interrupted");
  return result;
}

LaunchResult LaunchThreads(const BenchFlags& flags, const std::vector<std::string>& algos,
                           const AlgoDone& done) {
  LaunchResult result;
  auto transports = transport::CreateLoopbackTransports(flags.ranks);
  std::mutex mu;
  DoneCounter counter(flags.ranks, done);
  std::vector<std::thread> threads;
  for (int r = 0; r < flags.ranks; ++r) {
    threads.emplace_back([&, r] {
      (void)RunRank(flags, algos, *transports[r], [&](const RankAlgoReport& rep) {
        std::lock_guard<std::mutex> lock(mu);
        result.reports.push_back(rep);
        counter.Add(rep.algo);
      });
    });
  }
  // Every wait inside RunRank has a deadline, so the joins end.
  for (auto& t : threads) t.join();
  return result;
}

int RankProcessMain(const BenchFlags& flags, const std::vector<std::string>& algos) {
  const int rank = flags.rank;
  auto sink = [&](const RankAlgoReport& rep) {
    if (flags.report_fd >= 0) WriteAll(flags.report_fd, SerializeReport(rep) + "\n");
  };
  transport::FileBootstrap bootstrap(flags.bootstrap_dir, rank, flags.ranks);
  transport::ucx::UcxOptions options;
  options.listen_ip = member::DataIpFromEnvironment();  // bench/in_netns sets it per rank
  options.connect_timeout = std::chrono::milliseconds(flags.connect_timeout_ms);
  auto transport = transport::ucx::CreateUcxTransport(bootstrap, options);
  if (!transport.ok()) {
    std::fprintf(stderr, "gradex-bench rank %d: UCX transport: %s\n", rank,
                 transport.status().ToString().c_str());
    RankAlgoReport rep;
    rep.rank = rank;
    rep.algo = algos.front();
    rep.teams = TeamsFor(rep.algo, flags);
    rep.error = absl::StrCat("UCX transport: ", transport.status().ToString());
    sink(rep);
    return 1;
  }
  if (flags.fault_rank == rank && flags.fault_call < 0) {
    // Test hook: die without warning, as a crashed or preempted worker would.
    std::thread([ms = flags.fault_after_ms] {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      raise(SIGKILL);
    }).detach();
  }
  transport::Transport* t = transport->get();
  std::unique_ptr<FaultTransport> fault;
  std::function<void(uint64_t)> before_call;
  if (flags.fault_rank == rank && flags.fault_call >= 0) {
    fault = std::make_unique<FaultTransport>(*t, flags.fault_sends);
    t = fault.get();
    before_call = [&](uint64_t step) {
      if (step == static_cast<uint64_t>(flags.fault_call)) fault->Arm();
    };
  }
  absl::Status s = RunRank(flags, algos, *t, sink, before_call);
  if (!s.ok()) {
    std::fprintf(stderr, "gradex-bench rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace gradex::bench
