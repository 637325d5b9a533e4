// gradex._C.ucx_runtime(): which UCX this process loaded and what it offers.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "python/binding_common.h"

namespace gradex::python {
namespace {

// Which UCX this process runs and what it offers, in brief what `ucx_info -d`
// tells: a wheel carries its own UCX (its plugins in gradex.libs/ucx), and
// GRADEX_SYSTEM_UCX=1 makes gradex/__init__.py load the host's instead, so the
// build's version alone does not say which one is in use.
std::string LoadedFrom(const void* symbol) {
  Dl_info info{};
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // namespace

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
    params.features = UCP_FEATURE_TAG;  // what the transport asks for (transport/ucx/worker.cc)
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

}  // namespace gradex::python
