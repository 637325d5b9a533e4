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

std::string StatusText(const absl::Status& s) {
  return std::string(absl::StatusCodeToString(s.code())) + ": " + std::string(s.message());
}

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw GradexCppError(StatusText(s));
}

namespace {

// A keyword's value as the option's type; TypeError naming the keyword
// when it is not one. Durations are seconds here.
client::OptionValue FromPython(const client::OptionSpec& spec, const std::string& key,
                               py::handle v) {
  using client::OptionType;
  try {
    switch (spec.type) {
      case OptionType::kString:
        return py::cast<std::string>(v);
      case OptionType::kInt:
        return py::cast<int64_t>(v);
      case OptionType::kUint: {
        const int64_t x = py::cast<int64_t>(v);
        if (x < 0) {
          throw py::value_error("gradex: " + key + "=" + std::to_string(x) + ": expected " +
                                client::ExpectedText(spec));
        }
        return static_cast<uint64_t>(x);
      }
      case OptionType::kDouble:
        return py::cast<double>(v);
      case OptionType::kBool:
        return py::cast<bool>(v);
      case OptionType::kDuration: {
        const double s = py::cast<double>(v);
        const client::OptionRange& r = *spec.range;
        if (!(s > 0) || !(s * 1000 <= r.hi)) {
          throw py::value_error("gradex: " + key + "=" + client::FormatNumber(s) +
                                ": expected seconds in (0, " + client::FormatNumber(r.hi / 1000) +
                                "]");
        }
        return static_cast<int64_t>(std::ceil(s * 1000));
      }
      case OptionType::kParams: {
        catalog::ParamValues p;
        for (auto item : py::cast<py::dict>(v)) {
          if (py::isinstance<py::bool_>(item.second)) throw py::cast_error();
          p[py::cast<std::string>(item.first)] = py::cast<double>(item.second);
        }
        return p;
      }
    }
  } catch (py::cast_error&) {
    throw py::type_error("gradex: option " + key + " must be " + client::ExpectedText(spec) +
                         ", got " + std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  }
  throw py::type_error("gradex: option " + key + ": no Python form");
}

}  // namespace

// Options from a dict of keyword options on top of the environment (the
// explicit ones win), by the option table. Unknown keys are a TypeError so
// typos do not pass; a value out of its range is a ValueError naming it.
ClientOptions ParseOptions(const py::dict& kw, bool use_environment) {
  ClientOptions o;
  if (use_environment) ThrowIfError(client::ApplyEnvironment(&o));
  for (auto item : kw) {
    const std::string key = py::cast<std::string>(item.first);
    if (item.second.is_none()) continue;
    const client::OptionSpec* spec = client::FindPyKeyword(key);
    if (spec == nullptr) throw py::type_error("gradex: unknown client option '" + key + "'");
    absl::Status s =
        client::SetOption(&o, *spec, FromPython(*spec, key, item.second), "keyword " + key);
    if (!s.ok()) throw py::value_error("gradex: " + std::string(s.message()));
  }
  return o;
}

// The option table for Python (tests, help): one dict per option.
py::list OptionTableForPython() {
  py::list out;
  for (const client::OptionSpec& s : client::OptionTable()) {
    py::list env;
    for (const client::OptionEnv& e : s.env) {
      env.append(py::make_tuple(std::string(e.name), e.kind != client::EnvKind::kValue));
    }
    static constexpr const char* kTypes[] = {"str",  "int",      "uint",  "float",
                                             "bool", "duration", "params"};
    py::dict d;
    d["name"] = std::string(s.name);
    d["type"] = kTypes[static_cast<int>(s.type)];
    d["py_keyword"] = std::string(s.py_keyword);
    d["c_key"] = std::string(s.c_key);
    d["env"] = env;
    d["default"] = client::DefaultText(s);
    d["example"] = std::string(s.example);
    d["expected"] = client::ExpectedText(s);
    d["plan_decided"] = s.plan_decided;
    if (s.range) {
      d["range"] = py::make_tuple(s.range->lo, s.range->hi, s.range->lo_open, s.range->hi_open);
    } else {
      d["range"] = py::none();
    }
    out.append(d);
  }
  return out;
}

// Every option of ParseOptions(kw) in the table's text form, and which were
// given: what a test compares with the C ABI's and the environment's.
py::tuple ParsedOptionsText(const py::dict& kw, bool use_environment) {
  const ClientOptions o = ParseOptions(kw, use_environment);
  py::dict values, given;
  for (const client::OptionSpec& s : client::OptionTable()) {
    values[py::str(std::string(s.name))] = client::FormatValue(s, s.get(o));
  }
  for (const auto& [name, where] : o.given) given[py::str(name)] = where;
  return py::make_tuple(values, given);
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

// Which UCX this process runs and what it offers, in brief what `ucx_info -d`
// tells: a wheel carries its own UCX (its plugins in gradex.libs/ucx), and
// GRADEX_SYSTEM_UCX=1 makes gradex/__init__.py load the host's instead, so the
// build's version alone does not say which one is in use.
std::string LoadedFrom(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

py::dict UcxRuntime() {
  py::dict d;
  d["version"] = std::string(ucp_get_version_string());
  d["library"] = LoadedFrom(reinterpret_cast<const void*>(&ucp_get_version_string));
  // libucs looks for its plugins in the directory "ucx" beside itself first,
  // then in UCX_MODULE_DIR (ucs/sys/module.c).
  std::string ucs = LoadedFrom(reinterpret_cast<const void*>(&ucs_status_string));
  std::string modules = ucs.empty() ? "" : ucs.substr(0, ucs.rfind('/')) + "/ucx";
  if (const char* env = std::getenv("UCX_MODULE_DIR"); env != nullptr && *env != '\0') {
    modules += std::string(":") + env;
  }
  d["module_dirs"] = modules;
  std::string text;
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) == UCS_OK) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;  // what the transport asks for (transport/ucx_worker.cc)
    ucp_context_h context = nullptr;
    if (ucp_init(&params, config, &context) == UCS_OK) {
      char* buf = nullptr;
      size_t len = 0;
      if (FILE* f = open_memstream(&buf, &len); f != nullptr) {
        ucp_context_print_info(context, f);
        std::fclose(f);
        text.assign(buf, len);
        std::free(buf);
      }
      ucp_cleanup(context);
    }
    ucp_config_release(config);
  }
  // "#     component 4  :  ib" and "#      resource 1  :  md 1  dev 1  flags -- tcp/lo".
  py::list components, transports;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto last = line.find_last_of(' ');
    if (last == std::string::npos) continue;
    std::string word = line.substr(last + 1);
    if (line.find(" component ") != std::string::npos && line.find(" md ") == std::string::npos) {
      components.append(word);
    } else if (line.find(" resource ") != std::string::npos) {
      transports.append(word);
    }
  }
  d["components"] = components;
  d["transports"] = transports;
  d["context"] = text;
  return d;
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
  m.def("ucx_runtime", &gradex::python::UcxRuntime,
        "The UCX this process loaded: version, library, module_dirs, components, transports "
        "(resources: transport/device) and ucp_context_print_info's text.");
  gradex::python::BindPsWorker(m);
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
