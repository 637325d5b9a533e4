// gradex._C.PsWorker: the pybind11 binding of gradex::ps::PsWorker
// (ps/ps_worker.h), the asynchronous parameter-server worker
// under gradex.torch.DGSOptimizer. step() takes 1-D contiguous float32 CPU
// tensors or buffers (numpy arrays) and releases the GIL while it runs.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "ps/ps_option_table.h"
#include "ps/ps_worker.h"
#include "python/binding_common.h"

namespace gradex::python {
namespace {

struct Floats {
  float* data = nullptr;
  size_t n = 0;
  py::buffer_info info;  // keeps a buffer's view alive (empty for tensors)
};

// A torch.Tensor (duck-typed: the module does not link torch) or any object
// with the buffer protocol, 1-D, contiguous float32 in host memory.
Floats AsFloats(py::handle obj, const std::string& name, bool writable) {
  Floats f;
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "is_contiguous")) {
    const std::string dtype = py::str(obj.attr("dtype"));
    if (dtype != "torch.float32") throw py::type_error(name + " must be float32, not " + dtype);
    if (py::cast<int>(obj.attr("dim")()) != 1) throw py::value_error(name + " must be 1-D");
    if (!py::cast<bool>(obj.attr("is_contiguous")())) {
      throw py::value_error(name + " must be contiguous");
    }
    const std::string device = py::str(obj.attr("device").attr("type"));
    if (device != "cpu") throw py::value_error(name + " must be in host memory, not " + device);
    f.n = py::cast<size_t>(obj.attr("numel")());
    f.data = reinterpret_cast<float*>(py::cast<uintptr_t>(obj.attr("data_ptr")()));
    return f;
  }
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error(name + " must be a float32 tensor or array");
  }
  f.info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  if (f.info.format != py::format_descriptor<float>::format() || f.info.itemsize != 4) {
    throw py::type_error(name + " must be float32, not format '" + f.info.format + "'");
  }
  if (f.info.ndim != 1) throw py::value_error(name + " must be 1-D");
  if (f.info.shape[0] > 1 && f.info.strides[0] != 4) {
    throw py::value_error(name + " must be contiguous");
  }
  f.n = static_cast<size_t>(f.info.shape[0]);
  f.data = static_cast<float*>(f.info.ptr);
  return f;
}

class PyPsWorker {
 public:
  explicit PyPsWorker(std::unique_ptr<ps::PsWorker> w) : w_(std::move(w)) {}

  void Step(py::handle grad, py::handle params, double lr) {
    if (!w_) throw GradexCppError("FAILED_PRECONDITION: gradex PsWorker is closed");
    Floats g = AsFloats(grad, "grad", false);
    Floats p = AsFloats(params, "params", true);
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = w_->Step(std::span<const float>(g.data, g.n), std::span<float>(p.data, p.n),
                   static_cast<float>(lr));
    }
    ThrowIfError(s);
  }

  py::dict Stats() const {
    if (!w_) throw GradexCppError("FAILED_PRECONDITION: gradex PsWorker is closed");
    const ps::PsWorkerStats s = w_->Stats();
    py::dict d;
    d["epoch"] = s.epoch;
    d["worker"] = s.worker;
    d["steps"] = s.steps;
    d["failed_steps"] = s.failed_steps;
    d["version"] = s.version;
    d["staleness"] = s.staleness;
    d["max_staleness_seen"] = s.max_staleness_seen;
    d["sent_bytes"] = s.sent_bytes;
    d["recv_bytes"] = s.recv_bytes;
    d["last_sent_bytes"] = s.last_sent_bytes;
    d["last_recv_bytes"] = s.last_recv_bytes;
    d["pushes"] = s.steps;
    d["pushed_entries"] = s.pushed_entries;
    d["pulled_entries"] = s.pulled_entries;
    d["full_syncs"] = s.full_syncs;
    d["epochs_entered"] = s.epochs_entered;
    return d;
  }

  void Close() {
    if (!w_) return;
    absl::Status s;
    {
      py::gil_scoped_release nogil;
      s = w_->Close();
    }
    ThrowIfError(s);
  }

  int MetricsPort() const { return w_ ? w_->metrics_port() : -1; }

 private:
  std::unique_ptr<ps::PsWorker> w_;
};

// The worker's own keywords by its option table (ps/ps_option_table.h), the
// rest by the client's (ParseOptions): unknown ones are a TypeError, values
// out of range a ValueError naming the keyword.
std::unique_ptr<PyPsWorker> Create(std::vector<uint32_t> layer_sizes, bool use_environment,
                                   py::object rdv_set, py::object rdv_get, py::kwargs kw) {
  ps::PsWorkerOptions o;
  py::dict rest;
  std::vector<std::pair<const ps::PsOptionSpec*, py::handle>> own;
  for (auto item : kw) {
    const std::string key = py::cast<std::string>(item.first);
    const ps::PsOptionSpec* spec = ps::FindPsPyKeyword(key);
    if (spec == nullptr) {
      rest[item.first] = item.second;
    } else if (!item.second.is_none()) {
      own.emplace_back(spec, item.second);
    }
  }
  // The environment under the keywords: the worker's GRADEX_PS_* here, the
  // client's in ParseOptions.
  if (use_environment) ThrowIfError(ps::ApplyPsEnvironment(&o));
  o.client = ParseOptions(rest, use_environment);
  for (const auto& [spec, v] : own) {
    const std::string key(spec->spec.py_keyword);
    absl::Status s = ps::SetPsOption(&o, *spec, FromPython(spec->spec, key, v), "keyword " + key);
    if (!s.ok()) throw py::value_error("gradex: " + std::string(s.message()));
  }
  o.layer_sizes = std::move(layer_sizes);
  client::Rendezvous r = MakeRendezvous(std::move(rdv_set), std::move(rdv_get));
  absl::StatusOr<std::unique_ptr<ps::PsWorker>> w;
  {
    py::gil_scoped_release nogil;
    w = ps::PsWorker::Create(std::move(o), std::move(r));
  }
  ThrowIfError(w.status());
  return std::make_unique<PyPsWorker>(*std::move(w));
}

}  // namespace

void BindPsWorker(py::module_& m) {
  py::class_<PyPsWorker>(m, "PsWorker")
      .def(py::init(&Create), py::arg("layer_sizes"), py::arg("use_environment") = true,
           py::arg("rendezvous_set") = py::none(), py::arg("rendezvous_get") = py::none(),
           "Joins a parameter-server job (DGS; density=1: ASGD). layer_sizes: the model's "
           "parameters' sizes in order. Keyword options: the worker's (density, momentum, "
           "weight_decay, lr0, max_staleness, server_shards, snapshot_dir, snapshot_interval_s; "
           "docs/dgs.md's table) and gradex._C.Client's (job, rank, world_size, coordinator, "
           "token, timeout_s, ...).")
      .def("step", &PyPsWorker::Step, py::arg("grad"), py::arg("params"), py::arg("lr"),
           "One push-pull: params (1-D float32, the model's flat parameters) are updated in place.")
      .def("stats", &PyPsWorker::Stats)
      .def_property_readonly("metrics_port", &PyPsWorker::MetricsPort,
                             "The port its gradex_ps_worker_* metrics are served on (option "
                             "metrics_port, GRADEX_METRICS_PORT; 0 there picks one), -1: none.")
      .def("close", &PyPsWorker::Close);
}

}  // namespace gradex::python
