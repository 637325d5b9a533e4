// `--name value` flags of the small bench tools (gradex-dgs-bench,
// gradex-client-pipeline): one table per tool, each flag's setter parses and
// bounds its value, so that a bad value is refused naming the flag, and
// --help prints the usage. (gradex-bench has its own, larger, flags.h.)
#ifndef GRADEX_BENCH_CLI_H_
#define GRADEX_BENCH_CLI_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"

namespace gradex::bench {

struct CliFlag {
  std::string name;                      // "--steps"
  std::function<bool(const char*)> set;  // false: the value is refused
};

template <typename T>
std::function<bool(const char*)> IntIn(T* out, T lo, T hi) {
  return [=](const char* v) {
    T x{};
    if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) return false;
    *out = x;
    return true;
  };
}

// A real number in (lo, hi].
inline std::function<bool(const char*)> RealIn(double* out, double lo, double hi) {
  return [=](const char* v) {
    double x = 0;
    if (!absl::SimpleAtod(v, &x) || !(x > lo) || !(x <= hi)) return false;
    *out = x;
    return true;
  };
}

// One of `choices` (empty: any non-empty string).
inline std::function<bool(const char*)> Word(std::string* out,
                                             std::vector<std::string> choices = {}) {
  return [=](const char* v) {
    const std::string s = v;
    if (s.empty()) return false;
    if (!choices.empty() && std::find(choices.begin(), choices.end(), s) == choices.end()) {
      return false;
    }
    *out = s;
    return true;
  };
}

// Parses argv against `flags`; prints `usage` and exits 0 on --help. On an
// unknown flag, a missing value or a refused one: says which on stderr with
// the usage, and returns false (the tool exits 2).
inline bool ParseCli(int argc, char** argv, const char* tool, const char* usage,
                     const std::vector<CliFlag>& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    const CliFlag* flag = nullptr;
    for (const CliFlag& f : flags) {
      if (f.name == a) flag = &f;
    }
    const char* why = flag == nullptr ? "unknown flag" : i + 1 >= argc ? "no value for" : nullptr;
    if (why == nullptr && !flag->set(argv[i + 1])) why = "bad value for";
    if (why != nullptr) {
      std::fprintf(stderr, "%s: %s %s%s%s\n%s", tool, why, a.c_str(), i + 1 < argc ? " " : "",
                   i + 1 < argc ? argv[i + 1] : "", usage);
      return false;
    }
    ++i;
  }
  return true;
}

}  // namespace gradex::bench

#endif  // GRADEX_BENCH_CLI_H_
