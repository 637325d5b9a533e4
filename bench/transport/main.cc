// gradex-transport-bench: point-to-point bandwidth and latency of gradex's
// Transport over UCX between two processes, beside ucx_perftest's tag_bw and
// tag_lat on the same machine in the same run, and where the receiver's time
// went (match wait, receive, allocation, delivery; there is no copy step: a
// message lands in the buffer the caller gets).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/transport/p2p.h"
#include "bench/transport/perftest.h"
#include "member/data_interface.h"
#include "transport/file_bootstrap.h"
#include "transport/ucx/ucx_transport.h"
#include "version/version.h"

ABSL_FLAG(std::string, min_size, "1KiB", "smallest message (B, KiB, MiB suffixes)");
ABSL_FLAG(std::string, max_size, "64MiB", "largest message; sizes go up by 4x");
ABSL_FLAG(int, iters, 0, "timed messages per size (0: about 256 MiB or 1000 per size)");
ABSL_FLAG(int, window, 8, "sends in flight in the bandwidth test");
ABSL_FLAG(bool, latency, true, "also measure ping-pong latency");
ABSL_FLAG(bool, perftest, true, "run ucx_perftest tag_bw/tag_lat beside it (needs ucx-utils)");
ABSL_FLAG(bool, probe, true,
          "also run with every receive probed first (the transport before direct receives)");
ABSL_FLAG(int, port, 13370, "TCP port ucx_perftest's server listens on (127.0.0.1)");
ABSL_FLAG(int64_t, deadline_ms, 120000, "deadline of each size's run");

namespace gradex::bench {
namespace {

absl::StatusOr<size_t> ParseSize(const std::string& text) {
  size_t mult = 1;
  std::string num = text;
  for (auto [suffix, m] : {std::pair<const char*, size_t>{"KiB", 1024},
                           {"MiB", 1 << 20},
                           {"GiB", size_t{1} << 30},
                           {"B", 1}}) {
    const std::string s = suffix;
    if (num.size() > s.size() && num.compare(num.size() - s.size(), s.size(), s) == 0) {
      num.resize(num.size() - s.size());
      mult = m;
      break;
    }
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(num.c_str(), &end, 10);
  if (num.empty() || *end != '\0' || v == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "': want a positive number with B, KiB, MiB or GiB"));
  }
  return static_cast<size_t>(v) * mult;
}

int ItersFor(size_t bytes) {
  if (int i = absl::GetFlag(FLAGS_iters); i > 0) return i;
  const size_t target = size_t{256} << 20;
  return static_cast<int>(std::clamp<size_t>(target / bytes, 8, 1000));
}

// One row of results as the receiver (rank 1) saw them.
struct Row {
  P2pResult direct, probed, lat_direct;
  PerftestResult perf, perf_e;
};

std::string Fmt(double v, const char* f = "%.0f") { return absl::StrFormat(f, v); }

void PrintProfile(const char* name, const P2pResult& r) {
  const transport::RecvProfile& p = r.profile;
  const double n = p.receives > 0 ? static_cast<double>(p.receives) : 1;
  std::printf(
      "  %-7s %9zu B: %5.2f GB/s  per message: match wait %8.1f us, receive %8.1f us, "
      "alloc %7.1f us, deliver %6.1f us; %llu/%llu posted direct\n",
      name, r.bytes, r.bandwidth_mbs / 1e3, p.match_wait_s / n * 1e6, p.receive_s / n * 1e6,
      p.alloc_s / n * 1e6, p.deliver_s / n * 1e6, static_cast<unsigned long long>(p.posted_direct),
      static_cast<unsigned long long>(p.receives));
}

absl::StatusOr<std::unique_ptr<transport::Transport>> Connect(const std::string& dir, int rank,
                                                              size_t direct_bytes) {
  transport::FileBootstrap boot(dir, rank, 2);
  transport::ucx::UcxOptions options;
  options.listen_ip = member::DataIpFromEnvironment();
  options.direct_receive_bytes = direct_bytes;
  return transport::ucx::CreateUcxTransport(boot, options);
}

int RankMain(int rank, const std::string& dir, const std::vector<size_t>& sizes, int report_fd) {
  absl::StatusOr<std::unique_ptr<transport::Transport>> direct = Connect(dir, rank, 64 * 1024);
  if (!direct.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, direct.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<transport::Transport> probed;
  if (absl::GetFlag(FLAGS_probe)) {
    transport::FileBootstrap boot2(dir + "/probe", rank, 2);
    transport::ucx::UcxOptions options;
    options.listen_ip = member::DataIpFromEnvironment();
    options.direct_receive_bytes = 0;
    absl::StatusOr<std::unique_ptr<transport::Transport>> t =
        transport::ucx::CreateUcxTransport(boot2, options);
    if (!t.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, t.status().ToString().c_str());
      return 1;
    }
    probed = std::move(*t);
  }
  for (size_t bytes : sizes) {
    P2pOptions o;
    o.bytes = bytes;
    o.iters = ItersFor(bytes);
    o.window = absl::GetFlag(FLAGS_window);
    // A window's worth untimed first: the receives posted before any buffer
    // came back are probed; the timed ones are the steady state.
    o.warmup = std::max(2, o.window);
    const auto run = [&](transport::Transport& t, bool bandwidth) -> absl::StatusOr<P2pResult> {
      o.deadline =
          transport::DeadlineIn(std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
      return bandwidth ? MeasureBandwidth(t, o) : MeasureLatency(t, o);
    };
    Row row;
    // Alternated within the size so that both see the same machine.
    for (int which = 0; which < 2; ++which) {
      transport::Transport* t = which == 0 ? direct->get() : probed.get();
      if (t == nullptr) continue;
      absl::StatusOr<P2pResult> bw = run(*t, true);
      if (!bw.ok()) {
        std::fprintf(stderr, "rank %d, %zu B: %s\n", rank, bytes, bw.status().ToString().c_str());
        return 1;
      }
      (which == 0 ? row.direct : row.probed) = *bw;
    }
    if (absl::GetFlag(FLAGS_latency)) {
      absl::StatusOr<P2pResult> lat = run(**direct, false);
      if (!lat.ok()) {
        std::fprintf(stderr, "rank %d, %zu B: %s\n", rank, bytes, lat.status().ToString().c_str());
        return 1;
      }
      row.lat_direct = *lat;
    }
    if (rank == 1 && write(report_fd, &row, sizeof(row)) != sizeof(row)) return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gradex-transport-bench [--min_size 1KiB] [--max_size 64MiB] [--iters N]\n"
      "Bandwidth and latency of gradex's UCX Transport between two processes on this "
      "machine, beside ucx_perftest's (UCX_TLS and other UCX_* variables apply to both).");
  // absl's --version prints this (and --help, --helpfull are absl's too).
  absl::FlagsUsageConfig usage;
  usage.version_string = [] {
    return gradex::version::VersionLine("gradex-transport-bench") + "\n";
  };
  // absl's --help lists the flags of files named after the program; ours
  // live in main.cc.
  usage.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "bench/transport/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<size_t> lo = ParseSize(absl::GetFlag(FLAGS_min_size));
  absl::StatusOr<size_t> hi = ParseSize(absl::GetFlag(FLAGS_max_size));
  for (const auto* s : {&lo, &hi}) {
    if (!s->ok()) {
      std::fprintf(stderr, "gradex-transport-bench: %s\n",
                   std::string(s->status().message()).c_str());
      return 2;
    }
  }
  if (*hi < *lo) {
    std::fprintf(stderr, "gradex-transport-bench: --max_size is below --min_size\n");
    return 2;
  }
  const std::vector<size_t> sizes = SizeLadder(*lo, *hi);
  char tmpl[] = "/tmp/gradex-transport-bench.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string dir = tmpl;
  if (absl::GetFlag(FLAGS_probe)) mkdir((dir + "/probe").c_str(), 0700);
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    return 1;
  }
  // Forked before UCX or any thread exists in this process.
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    kids[r] = fork();
    if (kids[r] == 0) {
      close(fds[0]);
      _exit(RankMain(r, dir, sizes, fds[1]));
    }
  }
  close(fds[1]);
  std::vector<Row> rows;
  Row row;
  while (read(fds[0], &row, sizeof(row)) == sizeof(row)) rows.push_back(row);
  int failed = 0;
  for (pid_t k : kids) {
    int status = 0;
    waitpid(k, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string cleanup = absl::StrCat("rm -rf ", dir);
  (void)std::system(cleanup.c_str());
  if (failed > 0 || rows.size() != sizes.size()) {
    std::fprintf(stderr, "gradex-transport-bench: a rank failed (%zu of %zu sizes done)\n",
                 rows.size(), sizes.size());
    return 1;
  }
  const bool perf = absl::GetFlag(FLAGS_perftest);
  for (size_t i = 0; i < rows.size() && perf; ++i) {
    rows[i].perf = RunPerftest(sizes[i], ItersFor(sizes[i]), absl::GetFlag(FLAGS_port), false);
    rows[i].perf_e = RunPerftest(sizes[i], ItersFor(sizes[i]), absl::GetFlag(FLAGS_port), true);
  }
  const char* tls = std::getenv("UCX_TLS");
  std::printf(
      "gradex-transport-bench: 2 processes on this machine, UCX %s, UCX_TLS=%s, window %d\n",
      transport::ucx::UcxVersion().c_str(), tls == nullptr ? "(default)" : tls,
      absl::GetFlag(FLAGS_window));
  std::printf("%10s %8s | %11s %11s %13s %13s %7s | %8s %11s %11s\n", "bytes", "iters",
              "direct GB/s", "probed GB/s", "perftest GB/s", "perftest -e", "ratio", "lat us",
              "perftest us", "-e us");
  const auto cell = [](bool ok, double v, const char* f) { return ok ? Fmt(v, f) : "-"; };
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf("%10zu %8d | %11.3f %11s %13s %13s %7s | %8.1f %11s %11s\n", sizes[i],
                ItersFor(sizes[i]), r.direct.bandwidth_mbs / 1e3,
                cell(absl::GetFlag(FLAGS_probe), r.probed.bandwidth_mbs / 1e3, "%.3f").c_str(),
                cell(r.perf.ok, r.perf.bandwidth_gbs, "%.3f").c_str(),
                cell(r.perf_e.ok, r.perf_e.bandwidth_gbs, "%.3f").c_str(),
                cell(r.perf_e.ok && r.perf_e.bandwidth_gbs > 0,
                     r.direct.bandwidth_mbs / 1e3 / r.perf_e.bandwidth_gbs, "%.2f")
                    .c_str(),
                r.lat_direct.one_way_us, cell(r.perf.ok, r.perf.latency_us, "%.1f").c_str(),
                cell(r.perf_e.ok, r.perf_e.latency_us, "%.1f").c_str());
  }
  std::printf(
      "(GB/s = 1e9 bytes/s at the receiver; ratio = direct / perftest -e, whose endpoints have "
      "peer error handling as gradex's; perftest's MB/s are MiB/s, converted; lat = half the "
      "median round trip)\n");
  std::printf("where the receiver's time went, per message:\n");
  for (const Row& r : rows) {
    PrintProfile("direct", r.direct);
    if (absl::GetFlag(FLAGS_probe)) PrintProfile("probed", r.probed);
  }
  return 0;
}

}  // namespace
}  // namespace gradex::bench

int main(int argc, char** argv) { return gradex::bench::Main(argc, argv); }
