// A rank touches no GPU but its own: a process that hands the client device
// memory of GPU D (one rank, dense-ring, device buckets through the
// pipeline's staging threads) holds a CUDA context on D and on no other
// device, and on none before it uses one. Each case runs in a child process
// of its own (fork before any CUDA call), so that "before" is the process's
// start whatever ran earlier in this binary.
//
// Which devices a process has contexts on is asked two ways:
//   - the driver's primary-context state (cuDevicePrimaryCtxGetState), per
//     device, in the process itself. Exact, and blind to PID namespaces; the
//     runtime (ours and torch's) makes primary contexts only. It is a driver
//     API call, which never makes a context itself: the runtime's
//     cudaDeviceGetAttribute/cudaGetDeviceCount could not tell whether a
//     context exists and may initialise device 0 when asked.
//   - NVML's compute processes per GPU (what nvidia-smi and an operator see;
//     any context, primary or not), matched to CUDA's ordinals by PCI bus id
//     (CUDA_VISIBLE_DEVICES and CUDA's ordering differ from NVML's). In a
//     container NVML may list host PIDs: when it does not list this process
//     on the device it surely uses, the per-device process counts are
//     compared instead.
// Both libraries are opened with dlopen, so the test loads and skips where
// no NVIDIA driver is installed. Device 0 needs one GPU; the other devices
// (where cudaPointerGetAttributes on a fresh thread would open a context on
// device 0) need two and skip otherwise.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "device/device.h"
#include "services/client/client.h"

#if GRADEX_AGENT_CUDA
#include <cuda.h>  // the driver API's types; libcuda is opened at run time
#include <cuda_runtime_api.h>
#endif

namespace gradex::client {
namespace {

#if GRADEX_AGENT_CUDA

// The prefix scripts/gpu-check reads in a skip for "no GPU here"
// (tests/cuda_device.h; this test stays free of the CUDA runtime).
constexpr char kSkipNoDevice[] = "gradex-skip: no device: ";

// What a child reports, one line each: F (a failure), S (skip, why), N (a
// note), V (a number).
class Report {
 public:
  explicit Report(int fd) : fd_(fd) {}
  void Fail(const std::string& m) { Line('F', m); }
  void Skip(const std::string& m) { Line('S', m); }
  void Note(const std::string& m) { Line('N', m); }
  void Value(int v) { Line('V', std::to_string(v)); }

 private:
  void Line(char kind, std::string m) {
    for (char& c : m) c = c == '\n' ? ' ' : c;
    std::string line = std::string(1, kind) + " " + m + "\n";
    for (size_t off = 0; off < line.size();) {
      ssize_t w = write(fd_, line.data() + off, line.size() - off);
      if (w <= 0) return;
      off += static_cast<size_t>(w);
    }
  }
  int fd_;
};

struct ChildResult {
  std::string error;  // the child itself failed (crash, timeout)
  std::vector<std::string> failures, notes;
  std::optional<std::string> skip;
  int value = -1;
};

// Runs `body` in a forked child (this process must not have touched CUDA:
// a CUDA state is not inherited across fork) and collects its report. The
// child has 120 s.
ChildResult RunChild(const std::function<void(Report&)>& body) {
  ChildResult result;
  int fds[2];
  if (pipe(fds) != 0) return {.error = "pipe failed"};
  pid_t pid = fork();
  if (pid < 0) return {.error = "fork failed"};
  if (pid == 0) {
    close(fds[0]);
    Report report(fds[1]);
    body(report);
    _exit(0);  // no atexit handlers: the parent's gtest state is not ours
  }
  close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r <= 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    result.error = "the child did not finish within 120 s";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    result.error = absl::StrCat("the child ended with status ", status);
  }
  size_t start = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(start, end - start);
    start = end + 1;
    if (line.size() < 2) continue;
    const std::string msg = line.substr(2);
    if (line[0] == 'F') result.failures.push_back(msg);
    if (line[0] == 'N') result.notes.push_back(msg);
    if (line[0] == 'S') result.skip = msg;
    if (line[0] == 'V') result.value = std::atoi(msg.c_str());
  }
  return result;
}

// The child's failures become this test's; true when it ran (no skip).
bool Check(const ChildResult& r) {
  for (const std::string& n : r.notes) std::cout << "[   note   ] " << n << "\n";
  EXPECT_EQ(r.error, "");
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  return !r.skip && r.error.empty();
}

// The driver's view: which devices this process has a primary context on.
class Contexts {
 public:
  // Empty `why()` when usable.
  Contexts() {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why_ = absl::StrCat("no NVIDIA driver (", dlerror(), ")");
      return;
    }
    auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(lib, "cuInit"));
    auto count = reinterpret_cast<CUresult (*)(int*)>(dlsym(lib, "cuDeviceGetCount"));
    get_ = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(lib, "cuDeviceGet"));
    state_ = reinterpret_cast<CUresult (*)(CUdevice, unsigned*, int*)>(
        dlsym(lib, "cuDevicePrimaryCtxGetState"));
    bus_ = reinterpret_cast<CUresult (*)(char*, int, CUdevice)>(dlsym(lib, "cuDeviceGetPCIBusId"));
    if (!init || !count || !get_ || !state_ || !bus_) {
      why_ = "libcuda.so.1 lacks a driver entry point this test uses";
      return;
    }
    if (CUresult e = init(0); e != CUDA_SUCCESS) {
      why_ = absl::StrCat("no usable GPU (cuInit: error ", e, ")");
      return;
    }
    if (count(&devices_) != CUDA_SUCCESS || devices_ == 0) why_ = "no GPU";
  }
  const std::string& why() const { return why_; }
  int devices() const { return devices_; }
  // The ordinals with an active primary context.
  std::vector<int> Active() const {
    std::vector<int> on;
    for (int d = 0; d < devices_; ++d) {
      CUdevice dev;
      unsigned flags = 0;
      int active = 0;
      if (get_(&dev, d) == CUDA_SUCCESS && state_(dev, &flags, &active) == CUDA_SUCCESS && active)
        on.push_back(d);
    }
    return on;
  }
  std::string BusId(int d) const {
    CUdevice dev;
    char id[64] = {};
    if (get_(&dev, d) != CUDA_SUCCESS || bus_(id, sizeof id, dev) != CUDA_SUCCESS) return "";
    return id;
  }

 private:
  std::string why_;
  int devices_ = 0;
  CUresult (*get_)(CUdevice*, int) = nullptr;
  CUresult (*state_)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*bus_)(char*, int, CUdevice) = nullptr;
};

// NVML's view: the compute processes on every GPU of the machine. Declared
// here (nvml.h is not in the CUDA toolkit): nvmlProcessInfo_t as
// nvmlDeviceGetComputeRunningProcesses_v3 fills it.
struct NvmlProcess {
  unsigned int pid;
  unsigned long long used_memory;
  unsigned int gpu_instance, compute_instance;
};
using NvmlDevice = void*;

class Nvml {
 public:
  explicit Nvml(const Contexts& cuda) {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      why_ = absl::StrCat("no NVML (", dlerror(), ")");
      return;
    }
    auto init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    auto count = reinterpret_cast<int (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    auto by_index = reinterpret_cast<int (*)(unsigned, NvmlDevice*)>(
        dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    auto by_bus = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(
        dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    procs_ = reinterpret_cast<int (*)(NvmlDevice, unsigned*, NvmlProcess*)>(
        dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!init || !count || !by_index || !by_bus || !procs_) {
      why_ = "libnvidia-ml.so.1 lacks an entry point this test uses";
      return;
    }
    if (int e = init(); e != 0) {
      why_ = absl::StrCat("nvmlInit: error ", e);
      return;
    }
    unsigned n = 0;
    if (count(&n) != 0) n = 0;
    for (unsigned i = 0; i < n; ++i) {
      NvmlDevice h = nullptr;
      if (by_index(i, &h) == 0) all_.push_back(h);
    }
    for (int d = 0; d < cuda.devices(); ++d) {
      NvmlDevice h = nullptr;
      const std::string bus = cuda.BusId(d);
      if (bus.empty() || by_bus(bus.c_str(), &h) != 0) {
        why_ = absl::StrCat("NVML finds no GPU at CUDA device ", d, "'s bus id '", bus, "'");
        return;
      }
      of_cuda_[d] = h;
    }
  }
  const std::string& why() const { return why_; }
  // Per NVML device (all of the machine's, in NVML's order): the PIDs of
  // its compute processes; nullopt when NVML does not answer.
  std::optional<std::vector<std::vector<unsigned>>> Processes() const {
    std::vector<std::vector<unsigned>> per;
    for (NvmlDevice h : all_) {
      std::vector<NvmlProcess> p(512);
      unsigned n = static_cast<unsigned>(p.size());
      if (procs_(h, &n, p.data()) != 0) return std::nullopt;
      per.emplace_back();
      for (unsigned i = 0; i < n; ++i) per.back().push_back(p[i].pid);
    }
    return per;
  }
  // NVML's index of CUDA device d.
  size_t IndexOf(int d) const {
    for (size_t i = 0; i < all_.size(); ++i)
      if (all_[i] == of_cuda_.at(d)) return i;
    return all_.size();
  }

 private:
  std::string why_;
  std::vector<NvmlDevice> all_;
  std::map<int, NvmlDevice> of_cuda_;
  int (*procs_)(NvmlDevice, unsigned*, NvmlProcess*) = nullptr;
};

std::string List(const std::vector<int>& v) {
  return absl::StrCat("{", absl::StrJoin(v, ", "), "}");
}

ClientOptions OneRank() {
  ClientOptions o;
  o.job = "cuda-contexts-test";
  o.algorithm = "dense-ring";
  o.mean = true;
  o.timeout = std::chrono::milliseconds(20000);
  return o;
}

absl::Status Exchange(Client& c, std::span<float> data) {
  auto p = std::make_shared<std::promise<absl::Status>>();
  c.AllreduceAsync({{0, data.size()}}, data, Memory::kDevice, true,
                   [p](absl::Status s) { p->set_value(s); });
  std::future<absl::Status> f = p->get_future();
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
    return absl::DeadlineExceededError("the bucket did not end within 60 s");
  return f.get();
}

// Devices (NVML indices) on which NVML lists `pid`, or whose process count
// rose from `before` when NVML does not list `pid` on `own` at all.
std::vector<int> NvmlDevicesOf(const std::vector<std::vector<unsigned>>& before,
                               const std::vector<std::vector<unsigned>>& now, unsigned pid,
                               size_t own, bool* by_count) {
  std::vector<int> seen;
  for (size_t i = 0; i < now.size(); ++i)
    if (std::find(now[i].begin(), now[i].end(), pid) != now[i].end()) seen.push_back(int(i));
  *by_count = std::find(seen.begin(), seen.end(), int(own)) == seen.end();
  if (!*by_count) return seen;
  seen.clear();
  for (size_t i = 0; i < now.size() && i < before.size(); ++i)
    if (now[i].size() > before[i].size()) seen.push_back(int(i));
  return seen;
}

// The scenario, in the child: memory of device `d` handed to a client.
void OneRankOnDevice(int d, Report& r) {
  Contexts cuda;
  if (!cuda.why().empty()) return r.Skip(cuda.why());
  if (cuda.devices() <= d)
    return r.Skip(absl::StrCat("device ", d, " needs ", d + 1, " GPUs; ", cuda.devices(), " here"));
  Nvml nvml(cuda);
  if (!nvml.why().empty()) r.Note(absl::StrCat("NVML not used: ", nvml.why()));
  auto nvml_before = nvml.why().empty() ? nvml.Processes() : std::nullopt;

  // Loading gradex (and libcudart) opened nothing.
  if (std::vector<int> on = cuda.Active(); !on.empty())
    r.Fail(absl::StrCat("contexts before any CUDA use, on devices ", List(on)));

  // The trainer's memory on d, made as torch does (its device set first).
  std::vector<float> host(1 << 16);
  float* mem = nullptr;
  if (cudaSetDevice(d) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&mem), host.size() * sizeof(float)) != cudaSuccess)
    return r.Fail(absl::StrCat("allocating on device ", d));
  if (std::vector<int> on = cuda.Active(); on != std::vector<int>{d})
    return r.Fail(absl::StrCat("the trainer's allocation on device ", d, " shows contexts on ",
                               List(on), ": the count is not to be trusted"));

  {
    absl::StatusOr<std::unique_ptr<Client>> c = Client::Create(OneRank());
    if (!c.ok()) return r.Fail(absl::StrCat("Client::Create: ", c.status().ToString()));
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < host.size(); ++i)
        host[i] = static_cast<float>((i * 7 + step) % 29) - 14.0f;
      cudaMemcpy(mem, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
      absl::Status s = Exchange(**c, std::span<float>(mem, host.size()));
      if (!s.ok()) return r.Fail(absl::StrCat("step ", step, ": ", s.ToString()));
      std::vector<float> back(host.size());
      cudaMemcpy(back.data(), mem, back.size() * sizeof(float), cudaMemcpyDeviceToHost);
      if (back != host)
        r.Fail(absl::StrCat("step ", step, ": one rank's mean is not its gradient"));
    }
    if (absl::Status s = (*c)->Close(); !s.ok()) r.Fail("Close: " + s.ToString());
  }  // the pipeline's threads and pinned buffers are gone here

  if (std::vector<int> on = cuda.Active(); on != std::vector<int>{d})
    r.Fail(absl::StrCat("a rank given device ", d, "'s memory holds contexts on devices ", List(on),
                        " (driver's primary contexts)"));
  if (nvml_before) {
    auto now = nvml.Processes();
    if (!now) {
      r.Note("NVML lists no processes (no permission?): only the driver's count checked");
    } else {
      bool by_count = false;
      const size_t own = nvml.IndexOf(d);
      std::vector<int> seen =
          NvmlDevicesOf(*nvml_before, *now, static_cast<unsigned>(getpid()), own, &by_count);
      if (by_count)
        r.Note(
            "NVML does not list this PID on its own GPU (another PID namespace?): "
            "compared the GPUs' process counts instead");
      if (seen != std::vector<int>{int(own)})
        r.Fail(absl::StrCat("NVML sees this rank (", by_count ? "by count" : "by PID", ") on GPUs ",
                            List(seen), ", expected only ", own, " (CUDA device ", d, ")"));
    }
  }

  // What the staging avoids, shown on this driver: the runtime's pointer
  // query on a fresh thread (current device 0) with d's memory.
  if (d != 0) {
    std::thread([&] {
      cudaPointerAttributes attr{};
      cudaPointerGetAttributes(&attr, mem);
    }).join();
    const std::vector<int> on = cuda.Active();
    r.Note(absl::StrCat("for comparison, cudaPointerGetAttributes on a fresh thread ",
                        std::find(on.begin(), on.end(), 0) != on.end() ? "opened" : "did not open",
                        " a context on device 0 (contexts now on ", List(on), ")"));
  }
  cudaFree(mem);
}

#endif  // GRADEX_AGENT_CUDA

TEST(CudaContextsTest, ARankOnDevice0OpensNoOtherContext) {
  if (std::string(device::DefaultBackend()->name()) == "none") GTEST_SKIP() << "built without CUDA";
#if GRADEX_AGENT_CUDA
  ChildResult r = RunChild([](Report& report) { OneRankOnDevice(0, report); });
  if (!Check(r) && r.skip) GTEST_SKIP() << kSkipNoDevice << *r.skip;
#endif
}

// Each device but 0, each in a process of its own: the case where a thread
// that has not chosen its device would open a context on device 0.
TEST(CudaContextsTest, ARankOnAnotherDeviceLeavesDevice0Alone) {
  if (std::string(device::DefaultBackend()->name()) == "none") GTEST_SKIP() << "built without CUDA";
#if GRADEX_AGENT_CUDA
  // The device count comes from a child too: this process stays CUDA-free.
  ChildResult count = RunChild([](Report& report) {
    Contexts cuda;
    if (!cuda.why().empty()) return report.Skip(cuda.why());
    report.Value(cuda.devices());
  });
  if (!Check(count)) {
    if (count.skip) GTEST_SKIP() << kSkipNoDevice << *count.skip;
    return;
  }
  if (count.value < 2) GTEST_SKIP() << "gradex-skip: needs 2 GPUs, found " << count.value;
  for (int d = 1; d < count.value; ++d) {
    SCOPED_TRACE(absl::StrCat("device ", d, " of ", count.value));
    ChildResult r = RunChild([d](Report& report) { OneRankOnDevice(d, report); });
    if (!Check(r) && r.skip) ADD_FAILURE() << "skipped: " << *r.skip;
  }
#endif
}

}  // namespace
}  // namespace gradex::client
