// What the gradex._C bindings share (gradex_module.cc: Client; ps_worker_binding.cc:
// PsWorker): the error type Python sees as gradex.GradexError, the client
// options from a dict, the trainer's store as a Rendezvous.
#ifndef GRADEX_PYTHON_BINDING_COMMON_H_
#define GRADEX_PYTHON_BINDING_COMMON_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "services/client/client.h"
#include "services/client/option_table.h"

namespace gradex::python {

namespace py = pybind11;

// Raised for every failed absl::Status; Python sees gradex.GradexError.
struct GradexCppError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string StatusText(const absl::Status& s);
void ThrowIfError(const absl::Status& s);

// A Python object owned by C++ that may be dropped on a thread without the
// GIL (the progress thread): its last reference is released under the GIL.
class PyRef {
 public:
  explicit PyRef(py::object o) : o_(std::move(o)) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  ~PyRef() {
    if (!o_) return;
    if (!Py_IsInitialized()) {
      o_.release();  // the interpreter is gone: leak rather than crash
      return;
    }
    py::gil_scoped_acquire gil;
    o_ = py::object();
  }
  // Takes the object out (call with the GIL held).
  py::object Take() { return std::move(o_); }
  const py::object& get() const { return o_; }

 private:
  py::object o_;
};

// Options from a dict of keyword options on top of the environment (the
// explicit ones win). Unknown keys are a TypeError so typos do not pass.
client::ClientOptions ParseOptions(const py::dict& kw, bool use_environment);
// A keyword's value as the option's type (durations in seconds); TypeError
// naming the keyword when it is not one, ValueError out of a duration's range.
client::OptionValue FromPython(const client::OptionSpec& spec, const std::string& key,
                               py::handle v);
// The trainer's store: Python callables set(key, value) and get(key).
client::Rendezvous MakeRendezvous(py::object set, py::object get);
// The option table, one dict per option (binding_options.cc), and every
// option of ParseOptions(kw) in the table's text form with which were given.
py::list OptionTableForPython();
py::tuple ParsedOptionsText(const py::dict& kw, bool use_environment);
// Which UCX this process runs (ucx_runtime_binding.cc).
py::dict UcxRuntime();

// gradex._C.PsWorker (ps_worker_binding.cc).
void BindPsWorker(py::module_& m);

}  // namespace gradex::python

#endif  // GRADEX_PYTHON_BINDING_COMMON_H_
