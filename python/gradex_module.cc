// gradex._C: the pybind11 binding of gradex::client::Client (services/client/client.h)
// for the Python package `gradex` (python/gradex). The GIL is released while C++
// runs; the per-bucket callback runs on the client's progress thread and takes
// the GIL only to call into Python.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/binding_common.h"
#include "services/client/client.h"
#include "services/client/option_table.h"
#include "services/client/saved_state.h"
#include "version/version.h"

namespace py = pybind11;

namespace gradex::python {

// CPython 3.13 made _Py_IsFinalizing public as Py_IsFinalizing (and dropped the old name).
inline bool PythonFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

using client::BucketStats;
using client::Client;
using client::ClientOptions;
using client::Memory;
using client::ParamSpan;
using client::Rendezvous;

namespace {

class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> c) : c_(std::move(c)) {}
  ~PyClient() {
    if (c_) {
      py::gil_scoped_release nogil;
      (void)c_->Close();
      c_.reset();
    }
  }

  Client& get() {
    if (!c_) throw GradexCppError("FAILED_PRECONDITION: the gradex client is closed");
    return *c_;
  }

  // spans: [(key, elements)], data: address of `numel` contiguous float32.
  // callback(code, message) runs on the progress thread; code 0 is success.
  // stream: the cudaStream_t a device bucket was written on (0: the legacy
  // default stream, which gradex follows anyway).
  void AllreduceAsync(const std::vector<std::pair<uint64_t, size_t>>& spans, uintptr_t data,
                      size_t numel, bool device, bool last_in_step, py::object callback,
                      uintptr_t stream) {
    std::vector<ParamSpan> ps;
    ps.reserve(spans.size());
    size_t total = 0;
    for (const auto& [key, elements] : spans) {
      ps.push_back(ParamSpan{key, elements});
      total += elements;
    }
    if (total != numel) {
      throw py::value_error("gradex: spans cover " + std::to_string(total) +
                            " elements, the bucket has " + std::to_string(numel));
    }
    if (numel > 0 && data == 0) throw py::value_error("gradex: null data pointer");
    auto cb = std::make_shared<PyRef>(std::move(callback));
    Client::Done done = [cb](absl::Status s) {
      if (!Py_IsInitialized() || PythonFinalizing()) return;  // the trainer has exited
      py::gil_scoped_acquire gil;
      py::object f = cb->Take();
      if (!f) return;
      try {
        f(static_cast<int>(s.code()), s.ok() ? std::string() : StatusText(s));
      } catch (py::error_already_set& e) {
        // Nothing above the progress thread can catch it: report and go on.
        e.discard_as_unraisable("gradex bucket callback");
      }
    };
    Client& c = get();
    py::gil_scoped_release nogil;
    c.AllreduceAsync(std::move(ps), std::span<float>(reinterpret_cast<float*>(data), numel),
                     device ? Memory::kDevice : Memory::kHost, last_in_step, std::move(done),
                     device ? stream : 0);
  }

  void Flush() {
    Client& c = get();
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c.Flush();
    }
    ThrowIfError(s);
  }

  py::list Stats() {
    Client& c = get();
    std::vector<BucketStats> stats;
    {
      py::gil_scoped_release nogil;
      stats = c.Stats();
    }
    py::list out;
    for (const BucketStats& b : stats) {
      py::list spans;
      for (const ParamSpan& s : b.spans) spans.append(py::make_tuple(s.key, s.elements));
      py::dict d;
      d["spans"] = spans;
      d["elements"] = b.elements;
      d["algorithm"] = b.algorithm;
      d["density"] = b.density;
      d["calls"] = b.calls;
      d["dense_calls"] = b.dense_calls;
      d["fallback_switches"] = b.fallback_switches;
      d["sent_bytes"] = b.sent_bytes;
      d["recv_bytes"] = b.recv_bytes;
      d["last_s"] = b.last_s;
      d["sparse_s"] = b.sparse_s;
      d["dense_s"] = b.dense_s;
      d["residual_norm"] = b.residual_norm;
      d["threshold_reuse_hits"] = b.threshold_reuse_hits;
      d["threshold_reuse_misses"] = b.threshold_reuse_misses;
      d["device_path"] = b.device_path;
      d["device_to_host_bytes"] = b.device_to_host_bytes;
      d["host_to_device_bytes"] = b.host_to_device_bytes;
      d["device_waits"] = b.device_waits;
      d["device_syncs"] = b.device_syncs;
      d["device_allocations"] = b.device_allocations;
      d["device_pool_bytes"] = b.device_pool_bytes;
      d["exchange"] = b.exchange;
      d["intra_node_bytes"] = b.intra_node_bytes;
      d["inter_node_bytes"] = b.inter_node_bytes;
      d["intra_node_s"] = b.intra_node_s;
      d["inter_node_s"] = b.inter_node_s;
      out.append(d);
    }
    return out;
  }

  py::bytes SaveState() {
    Client& c = get();
    absl::StatusOr<std::string> s;
    {
      py::gil_scoped_release nogil;
      s = c.SaveState();
    }
    ThrowIfError(s.status());
    return py::bytes(*s);
  }

  // `velocities` (span key -> float32 bytes), when given, replace the
  // blob's: GradexState.state_dict() carries them beside it.
  void LoadState(const std::string& state, std::optional<py::dict> velocities) {
    Client& c = get();
    std::string blob = state;
    if (velocities) {
      absl::StatusOr<client::SavedState> decoded = client::DecodeState(state);
      ThrowIfError(decoded.status());
      decoded->velocities.clear();
      for (auto item : *velocities) {
        const std::string bytes =
            py::cast<std::string>(py::bytes(py::reinterpret_borrow<py::object>(item.second)));
        if (bytes.size() % sizeof(float) != 0) {
          throw py::value_error("gradex: a velocity's bytes are not float32 values");
        }
        std::vector<float> u(bytes.size() / sizeof(float));
        std::memcpy(u.data(), bytes.data(), bytes.size());
        decoded->velocities[py::cast<uint64_t>(item.first)] = std::move(u);
      }
      blob = client::EncodeState(*decoded);
    }
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c.LoadState(blob);
    }
    ThrowIfError(s);
  }

  void Close() {
    if (!c_) return;
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = c_->Close();
    }
    ThrowIfError(s);
  }

 private:
  std::unique_ptr<Client> c_;
};

std::unique_ptr<PyClient> Create(py::dict options, bool use_environment, py::object rdv_set,
                                 py::object rdv_get) {
  ClientOptions o = ParseOptions(options, use_environment);
  client::ApplyDependentDefaults(&o);
  Rendezvous r = MakeRendezvous(std::move(rdv_set), std::move(rdv_get));
  absl::StatusOr<std::unique_ptr<Client>> c;
  {
    py::gil_scoped_release nogil;
    c = Client::Create(std::move(o), std::move(r));
  }
  ThrowIfError(c.status());
  return std::make_unique<PyClient>(std::move(*c));
}

}  // namespace
}  // namespace gradex::python

PYBIND11_MODULE(_C, m) {
  using gradex::python::PyClient;
  m.doc() = "gradex's C++ client (services/client/client.h); use gradex.torch";
  py::register_exception<gradex::python::GradexCppError>(m, "GradexError", PyExc_RuntimeError);
  // The release (VERSION) and what this module was built from: the same
  // values as every binary's --version and the gradex_build_info metric.
  m.attr("__version__") = gradex::version::Version();
  m.attr("build_info") = py::dict(py::arg("version") = gradex::version::Version(),
                                  py::arg("git") = gradex::version::GitCommit(),
                                  py::arg("cuda") = gradex::version::BuildCudaVersion(),
                                  py::arg("ucx") = gradex::version::BuildUcxVersion(),
                                  py::arg("wire_protocol") = gradex::version::kWireProtocol);
  m.def("ucx_runtime", &gradex::python::UcxRuntime,
        "The UCX this process loaded: version, library, module_dirs, components, transports "
        "(resources: transport/device) and ucp_context_print_info's text.");
  gradex::python::BindPsWorker(m);
  m.attr("AUTO_WARMUP_STEPS") = gradex::client::kAutoWarmupSteps;
  m.def("option_table", &gradex::python::OptionTableForPython,
        "Every client option: name, type, Python keyword, C key, environment variables, "
        "default, range, whether the job's plan decides it (services/client/option_table.h).");
  m.def("_parsed_options", &gradex::python::ParsedOptionsText, py::arg("options"),
        py::arg("use_environment") = false,
        "The options Client.create would use, in the option table's text form, and which "
        "were given explicitly (for tests).");
  m.def(
      "velocities_of",
      [](const py::bytes& blob) {
        absl::StatusOr<gradex::client::SavedState> s =
            gradex::client::DecodeState(std::string(blob));
        gradex::python::ThrowIfError(s.status());
        py::dict out;
        for (const auto& [key, u] : s->velocities) {
          out[py::int_(key)] =
              py::bytes(reinterpret_cast<const char*>(u.data()), u.size() * sizeof(float));
        }
        return out;
      },
      py::arg("state"), "The velocities (span key -> float32 bytes) of a SaveState blob.");
  py::class_<PyClient>(m, "Client")
      .def_static("create", &gradex::python::Create, py::arg("options"),
                  py::arg("use_environment") = true, py::arg("rendezvous_set") = py::none(),
                  py::arg("rendezvous_get") = py::none(),
                  "Joins (or, on rank 0 without a coordinator, starts) the job's coordinator.")
      .def("allreduce_async", &PyClient::AllreduceAsync, py::arg("spans"), py::arg("data"),
           py::arg("numel"), py::arg("device"), py::arg("last_in_step"), py::arg("callback"),
           py::arg("stream") = 0)
      .def("flush", &PyClient::Flush)
      .def("stats", &PyClient::Stats)
      .def("save_state", &PyClient::SaveState)
      .def("load_state", &PyClient::LoadState, py::arg("state"), py::arg("velocities") = py::none())
      .def("close", &PyClient::Close)
      .def_property_readonly("rank", [](PyClient& c) { return c.get().rank(); })
      .def_property_readonly("world_size", [](PyClient& c) { return c.get().world_size(); })
      .def_property_readonly("step", [](PyClient& c) { return c.get().step(); })
      .def_property_readonly("coordinator", [](PyClient& c) { return c.get().coordinator(); });
}
