// The bindings' shared parts (binding_common.h): gradex errors as Python
// exceptions, client options from Python keywords by the option table, the
// option table itself for Python, and the trainer's store as a Rendezvous.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "python/binding_common.h"
#include "services/client/client.h"
#include "services/client/option_table.h"

namespace gradex::python {

using client::ClientOptions;
using client::Rendezvous;

std::string StatusText(const absl::Status& s) {
  return std::string(absl::StatusCodeToString(s.code())) + ": " + std::string(s.message());
}

void ThrowIfError(const absl::Status& s) {
  if (!s.ok()) throw GradexCppError(StatusText(s));
}

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
        // A range that takes 0 ms takes 0 s; else the least is "more than 0".
        const bool zero = r.lo == 0 && !r.lo_open;
        if (!(s > 0 || (zero && s == 0)) || !(s * 1000 <= r.hi)) {
          throw py::value_error("gradex: " + key + "=" + client::FormatNumber(s) +
                                ": expected seconds in " + (zero ? "[0, " : "(0, ") +
                                client::FormatNumber(r.hi / 1000) + "]");
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

}  // namespace gradex::python
