// gradex._C: the pybind11 binding of gradex::client::Client (services/client/client.h)
// for the Python package `gradex` (python/gradex). The GIL is released while C++
// runs; the per-bucket callback runs on the client's progress thread and takes
// the GIL only to call into Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/binding_common.h"
#include "services/client/client.h"
#include "services/client/saved_state.h"
#include "version/version.h"

namespace py = pybind11;

namespace gradex::python {

using client::BucketStats;
using client::Client;
using client::ClientOptions;
using client::Memory;
using client::ParamSpan;
using client::Rendezvous;

std::string StatusText(const absl::Status& s) {
  return std::string(absl::StatusCodeToString(s.code())) + ": " + std::string(s.message());
}

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw GradexCppError(StatusText(s));
}

// Options from a dict of keyword options on top of the environment (the
// explicit ones win). Unknown keys are a TypeError so typos do not pass.
ClientOptions ParseOptions(const py::dict& kw, bool use_environment) {
  ClientOptions o;
  if (use_environment) ThrowIfError(client::ApplyEnvironment(&o));
  for (auto item : kw) {
    const std::string key = py::cast<std::string>(item.first);
    py::handle v = item.second;
    if (v.is_none()) continue;
    if (key == "job")
      o.job = py::cast<std::string>(v);
    else if (key == "rank")
      o.rank = py::cast<int>(v);
    else if (key == "world_size")
      o.world_size = py::cast<int>(v);
    else if (key == "local_rank")
      o.local_rank = py::cast<int>(v);
    else if (key == "coordinator")
      o.coordinator = py::cast<std::string>(v);
    else if (key == "token")
      o.token = py::cast<std::string>(v);
    else if (key == "advertise_host")
      o.advertise_host = py::cast<std::string>(v);
    else if (key == "algorithm")
      o.algorithm = py::cast<std::string>(v);
    else if (key == "density")
      o.density = py::cast<double>(v);
    else if (key == "teams")
      o.teams = py::cast<int>(v);
    else if (key == "start_iter")
      o.start_iter = py::cast<uint64_t>(v);
    else if (key == "min_compression_rate")
      o.min_compression_rate = py::cast<double>(v);
    else if (key == "dense_probe_period")
      o.dense_probe_period = py::cast<uint64_t>(v);
    else if (key == "refuse_nonfinite")
      o.refuse_nonfinite = py::cast<bool>(v);
    else if (key == "pipeline")
      o.pipeline = py::cast<bool>(v);
    else if (key == "momentum_correction")
      o.momentum_correction = py::cast<double>(v);
    else if (key == "factor_masking")
      o.factor_masking = py::cast<bool>(v);
    else if (key == "max_bucket_elements")
      o.max_bucket_elements = py::cast<size_t>(v);
    else if (key == "params") {
      for (auto p : py::cast<py::dict>(v)) {
        o.params[py::cast<std::string>(p.first)] = py::cast<double>(p.second);
      }
    } else if (key == "timeout_s") {
      const double s = py::cast<double>(v);
      if (!(s > 0) || !std::isfinite(s)) throw py::value_error("timeout_s must be > 0");
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000)));
    } else if (key == "mean")
      o.mean = py::cast<bool>(v);
    else if (key == "metrics_port")
      o.metrics_port = py::cast<int>(v);
    else if (key == "data_ip")
      o.data_ip = py::cast<std::string>(v);
    else if (key == "timeline_path")
      o.timeline_path = py::cast<std::string>(v);
    else
      throw py::type_error("gradex: unknown client option '" + key + "'");
  }
  return o;
}

// The trainer's store as a Rendezvous: Python callables set(key, value) and
// get(key) -> bytes|str, called with the GIL; a Python exception becomes an
// UNAVAILABLE status carrying its text.
Rendezvous MakeRendezvous(py::object set, py::object get) {
  Rendezvous r;
  if (set.is_none() && get.is_none()) return r;
  auto set_ref = std::make_shared<PyRef>(std::move(set));
  auto get_ref = std::make_shared<PyRef>(std::move(get));
  r.set = [set_ref](const std::string& key, const std::string& value) -> absl::Status {
    py::gil_scoped_acquire gil;
    try {
      set_ref->get()(key, py::bytes(value));
      return absl::OkStatus();
    } catch (py::error_already_set& e) {
      return absl::UnavailableError("rendezvous set('" + key + "'): " + e.what());
    }
  };
  r.get = [get_ref](const std::string& key) -> absl::StatusOr<std::string> {
    py::gil_scoped_acquire gil;
    try {
      py::object v = get_ref->get()(key);
      if (py::isinstance<py::bytes>(v)) return py::cast<std::string>(v);
      return py::cast<std::string>(py::str(v));
    } catch (py::error_already_set& e) {
      return absl::UnavailableError("rendezvous get('" + key + "'): " + e.what());
    }
  };
  return r;
}

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
  void AllreduceAsync(const std::vector<std::pair<uint64_t, size_t>>& spans, uintptr_t data,
                      size_t numel, bool device, bool last_in_step, py::object callback) {
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
      if (!Py_IsInitialized() || _Py_IsFinalizing()) return;  // the trainer has exited
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
                     device ? Memory::kDevice : Memory::kHost, last_in_step, std::move(done));
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
  m.attr("__version__") = gradex::Version();
  m.attr("build_info") = py::dict(
      py::arg("version") = gradex::Version(), py::arg("git") = gradex::GitCommit(),
      py::arg("cuda") = gradex::BuildCudaVersion(), py::arg("ucx") = gradex::BuildUcxVersion(),
      py::arg("wire_protocol") = gradex::kWireProtocol);
  gradex::python::BindPsWorker(m);
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
           py::arg("numel"), py::arg("device"), py::arg("last_in_step"), py::arg("callback"))
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
