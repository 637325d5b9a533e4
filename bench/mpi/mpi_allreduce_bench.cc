// mpi-allreduce-bench: Open MPI's dense MPI_Allreduce (MPI_SUM, float) over the
// very gradients gradex-bench generates, timed by gradex-bench's rule, printed
// as gradex-bench's JSON line (algo "mpi-allreduce"). It is the external
// anchor of bench/compare: a tuned dense allreduce nobody here wrote.
//
// Usage: mpirun -np P mpi-allreduce-bench [--elements N] [--density D]
//          [--iters I] [--warmup W] [--seed S] [--integer] [--net-dev DEV]
//          [--json-out FILE] [--quiet]
#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/gradient_gen.h"
#include "catalog/fnv1a.h"
#include "version/version.h"

namespace {

struct Flags {
  uint64_t elements = 25'000'000;
  double density = 0.01;  // echoed only: a dense allreduce ignores it
  int iters = 5;
  int warmup = 2;
  uint64_t seed = 1;
  bool integer = false;
  bool quiet = false;
  std::string net_dev;   // count this interface's wire bytes (netns runs)
  std::string json_out;  // also append the JSON line here
};

template <typename T>
bool ParseNum(const char* s, T* out) {
  const char* end = s + std::strlen(s);
  auto [p, ec] = std::from_chars(s, end, *out);
  return ec == std::errc() && p == end && p != s;
}

// Returns an error message, empty when the flags are fine. Not absl::flags:
// this driver links no absl (only MPI), and absl cannot take hyphenated names
// (see bench/flags.cc).
std::string ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--integer") {
      f->integer = true;
      continue;
    }
    if (a == "--quiet") {
      f->quiet = true;
      continue;
    }
    if (i + 1 >= argc) return "flag " + a + " needs a value (or is unknown)";
    const char* v = argv[++i];
    bool ok = true;
    if (a == "--elements") {
      ok = ParseNum(v, &f->elements) && f->elements >= 1 && f->elements <= 0xffffffffULL;
    } else if (a == "--density") {
      ok = ParseNum(v, &f->density) && f->density > 0 && f->density <= 1;
    } else if (a == "--iters") {
      ok = ParseNum(v, &f->iters) && f->iters >= 1;
    } else if (a == "--warmup") {
      ok = ParseNum(v, &f->warmup) && f->warmup >= 0;
    } else if (a == "--seed") {
      ok = ParseNum(v, &f->seed);
    } else if (a == "--net-dev") {
      f->net_dev = v;
      ok = !f->net_dev.empty() && f->net_dev.find('/') == std::string::npos;
    } else if (a == "--json-out") {
      f->json_out = v;
      ok = !f->json_out.empty();
    } else {
      return "unknown flag " + a;
    }
    if (!ok) return "bad value '" + std::string(v) + "' for " + a;
  }
  return "";
}

// Wire bytes of an interface (Ethernet frames, so TCP/IP headers and
// retransmissions included); -1 when unreadable.
int64_t NetCounter(const std::string& dev, const char* which) {
  std::ifstream in("/sys/class/net/" + dev + "/statistics/" + which);
  int64_t x = -1;
  if (!(in >> x)) return -1;
  return x;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Nearest rank, as gradex-bench's Percentile.
double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  size_t r = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  r = std::clamp<size_t>(r, 1, v.size());
  return v[r - 1];
}

uint64_t HashFloats(const std::vector<float>& x) {
  uint64_t h = gradex::catalog::kFnv1aOffsetBasis;  // FNV-1a over the bits
  for (float f : x) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    h = gradex::catalog::Fnv1aMix(h, b);
  }
  return h;
}

std::string Num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

int Run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Flags f;
  if (std::string err = ParseFlags(argc, argv, &f); !err.empty()) {
    if (rank == 0) std::fprintf(stderr, "mpi-allreduce-bench: %s\n", err.c_str());
    return 2;
  }
  const size_t n = f.elements;
  std::vector<float> grad(n), result(n);
  const int total = f.warmup + f.iters;
  std::vector<double> took;  // this rank's timed calls
  int64_t tx0 = -1, rx0 = -1, tx1 = -1, rx1 = -1;
  using Clock = std::chrono::steady_clock;
  for (int it = 0; it < total; ++it) {
    gradex::bench::GenerateGradient(f.seed, rank, static_cast<uint64_t>(it), f.integer, grad);
    // gradex-bench's rule: align every call's start, each rank times its own
    // call, and a call costs what its slowest rank took.
    MPI_Barrier(MPI_COMM_WORLD);
    if (it == f.warmup && !f.net_dev.empty()) {
      tx0 = NetCounter(f.net_dev, "tx_bytes");
      rx0 = NetCounter(f.net_dev, "rx_bytes");
    }
    const auto t0 = Clock::now();
    const int rc = MPI_Allreduce(grad.data(), result.data(), static_cast<int>(n), MPI_FLOAT,
                                 MPI_SUM, MPI_COMM_WORLD);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "mpi-allreduce-bench: rank %d: MPI_Allreduce failed (%d)\n", rank, rc);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0 && !f.quiet) {
      std::fprintf(stderr, "[mpi-allreduce-bench] call %d/%d took %.3f s\n", it + 1, total, s);
    }
    if (it >= f.warmup) took.push_back(s);
  }
  // A rank's call ends when it has received everything, while its own last
  // bytes may still wait in the link's queue: read the counters once every
  // rank is done and the queues have drained (the barrier adds ~100 bytes).
  if (!f.net_dev.empty()) {
    MPI_Barrier(MPI_COMM_WORLD);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    tx1 = NetCounter(f.net_dev, "tx_bytes");
    rx1 = NetCounter(f.net_dev, "rx_bytes");
  }

  // Per call, the slowest rank; every rank's median for the phase column.
  std::vector<double> all(static_cast<size_t>(ranks) * f.iters);
  MPI_Gather(took.data(), f.iters, MPI_DOUBLE, all.data(), f.iters, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const uint64_t hash = HashFloats(result);
  std::vector<uint64_t> hashes(ranks);
  MPI_Gather(&hash, 1, MPI_UINT64_T, hashes.data(), 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  const bool counted = tx0 >= 0 && rx0 >= 0 && tx1 >= 0 && rx1 >= 0;
  double bytes[2] = {counted ? double(tx1 - tx0) : 0, counted ? double(rx1 - rx0) : 0};
  double byte_sums[2] = {0, 0};
  MPI_Reduce(bytes, byte_sums, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  int counted_all = counted ? 1 : 0, counted_min = 0;
  MPI_Reduce(&counted_all, &counted_min, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD);
  if (rank != 0) return 0;

  std::vector<double> per_call(f.iters, 0);
  double comm = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<double> mine(all.begin() + r * f.iters, all.begin() + (r + 1) * f.iters);
    for (int i = 0; i < f.iters; ++i) per_call[i] = std::max(per_call[i], mine[i]);
    comm += Median(mine) / ranks;
  }
  bool consistent = true;
  for (uint64_t h : hashes) consistent = consistent && h == hashes[0];

  // Conservation: the last call's result against the exact sum of every rank's
  // gradient, regenerated here (same seed, rank and iteration rule).
  std::vector<double> exact(n, 0.0);
  for (int r = 0; r < ranks; ++r) {
    gradex::bench::GenerateGradient(f.seed, r, static_cast<uint64_t>(total - 1), f.integer, grad);
    for (size_t i = 0; i < n; ++i) exact[i] += grad[i];
  }
  double max_err = 0, max_sum = 0;
  uint64_t nnz = 0;
  for (size_t i = 0; i < n; ++i) {
    max_err = std::max(max_err, std::fabs(exact[i] - double(result[i])));
    max_sum = std::max(max_sum, std::fabs(exact[i]));
    nnz += result[i] != 0.0f;
  }

  const double med = Median(per_call);
  const double algbw = med > 0 ? double(n) * 4.0 / med / 1e9 : 0;
  const double busbw = algbw * 2.0 * double(ranks - 1) / double(ranks);
  const std::string sent = counted_min ? Num(byte_sums[0] / ranks / f.iters) : "null";
  const std::string recv = counted_min ? Num(byte_sums[1] / ranks / f.iters) : "null";
  const std::string bytes_from =
      counted_min ? "netdev " + f.net_dev + " (wire bytes, TCP/IP headers included)"
                  : "not measured";
  std::string line =
      "{\"algo\":\"mpi-allreduce\",\"ranks\":" + std::to_string(ranks) +
      ",\"teams\":1,\"elements\":" + std::to_string(n) + ",\"density\":" + Num(f.density) +
      ",\"iters\":" + std::to_string(f.iters) + ",\"median_s\":" + Num(med) +
      ",\"p90_s\":" + Num(Percentile(per_call, 0.9)) + ",\"sent_bytes_per_rank\":" + sent +
      ",\"recv_bytes_per_rank\":" + recv + ",\"result_nnz\":" + std::to_string(nnz) +
      ",\"consistent\":" + (consistent ? "true" : "false") +
      ",\"conservation_max_abs_err\":" + Num(max_err) + ",\"algbw_gbps\":" + Num(algbw) +
      ",\"busbw_gbps\":" + Num(busbw) + ",\"selection_s\":0,\"communication_s\":" + Num(comm) +
      ",\"reduction_s\":0,\"bytes_from\":\"" + bytes_from + "\"}";
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (!f.json_out.empty()) {
    std::FILE* out = std::fopen(f.json_out.c_str(), "a");
    if (!out) {
      std::fprintf(stderr, "mpi-allreduce-bench: cannot open --json-out %s\n", f.json_out.c_str());
      return 1;
    }
    std::fprintf(out, "%s\n", line.c_str());
    std::fclose(out);
  }
  // gradex-bench's tolerance: float sums in another order than the exact one
  // differ by rounding only (relative 1e-5 of max |sum|); integers are exact.
  const bool conserved = f.integer ? max_err == 0 : max_err <= 1e-5 * max_sum;
  return consistent && conserved ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (gradex::version::PrintVersionIfAsked(argc, argv, "mpi-allreduce-bench")) return 0;
  MPI_Init(&argc, &argv);
  // A bad flag is seen by every rank alike, so all return before any collective.
  const int rc = Run(argc, argv);
  MPI_Finalize();
  return rc;
}
