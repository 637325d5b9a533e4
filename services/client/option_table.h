// Every ClientOptions field declared once, in the spirit of the catalog's
// ParamSpec: its name, type, range, environment variables, C ABI key, Python
// keyword, whether the job's plan decides it, and how to read and write it.
// The default is the one ClientOptions' initialiser gives. The Python
// keywords (python/gradex_module.cc), the C ABI keys (c_api.cc, c_api_ps.cc),
// the environment (environment.cc), Client::Create's checks, the embedded
// coordinator's job config and the README's table (gradex-options) all read
// this table; none of them names an option itself.
#ifndef GRADEX_SERVICES_CLIENT_OPTION_TABLE_H_
#define GRADEX_SERVICES_CLIENT_OPTION_TABLE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "catalog/catalog.h"
#include "services/client/client.h"

namespace gradex::client {

// kDuration holds milliseconds (C ABI: integer milliseconds; Python:
// seconds). kParams: algorithm parameters by catalog name.
enum class OptionType { kString, kInt, kUint, kDouble, kBool, kDuration, kParams };

using OptionValue =
    std::variant<std::string, int64_t, uint64_t, double, bool, catalog::ParamValues>;

// Numbers within [lo, hi], an end excluded where said.
struct OptionRange {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
};

// kFile: the variable names a file (<= 1 MiB, not empty) holding the value;
// kTrimmedFile: the same, surrounding whitespace stripped (a token).
enum class EnvKind { kValue, kFile, kTrimmedFile };
struct OptionEnv {
  absl::string_view name;
  EnvKind kind = EnvKind::kValue;
};

struct OptionSpec {
  absl::string_view name;  // the ClientOptions member
  OptionType type = OptionType::kString;
  std::optional<OptionRange> range;            // numbers (kDuration: milliseconds)
  bool (*valid)(absl::string_view) = nullptr;  // strings; null: any
  absl::string_view expected;                  // what `valid` accepts, in words
  std::vector<OptionEnv> env;                  // the first one set wins
  absl::string_view c_key;                     // "" none; kParams: the prefix "param."
  absl::string_view py_keyword;                // "" none
  // The job's plan decides it: with a coordinator given by address its job
  // config, else rank 0's options (its embedded coordinator's job). A rank
  // asking for another value is refused unless allow_plan_override.
  bool plan_decided = false;
  absl::string_view job_field;  // the JobConfig field the embedded coordinator's job sets
  absl::string_view example;    // a valid value other than the default (tests)
  absl::string_view description;
  OptionValue (*get)(const ClientOptions&) = nullptr;
  void (*set)(ClientOptions*, OptionValue) = nullptr;
};

// Every option, in the README's order.
const std::vector<OptionSpec>& OptionTable();
// Null when none.
const OptionSpec* FindOption(absl::string_view name);
const OptionSpec* FindCKey(absl::string_view key);  // "param.NAME" finds params
const OptionSpec* FindPyKeyword(absl::string_view keyword);

// "an integer in [0, 65535]", "a number in (0, 1]", "0 or 1", the string's
// `expected`, or "any text".
std::string ExpectedText(const OptionSpec& spec);
// The value in the C ABI's text form: integers, numbers in their shortest
// exact form, bools 0/1, durations in milliseconds, params "a=1,b=2" (by name).
std::string FormatValue(const OptionSpec& spec, const OptionValue& value);
// A number in its shortest form that reads back exactly.
std::string FormatNumber(double x);
// The default (ClientOptions' initialiser), formatted.
std::string DefaultText(const OptionSpec& spec);
// The C ABI's and the environment's text as a value of the spec's type
// (kParams: one value, see SetFromCKey). Not range-checked.
absl::StatusOr<OptionValue> ParseOptionText(const OptionSpec& spec, absl::string_view text);
// OK when `value` is within the spec's range (or valid); else
// INVALID_ARGUMENT "WHERE='VALUE': expected ..." naming the range.
absl::Status CheckOptionValue(const OptionSpec& spec, const OptionValue& value,
                              absl::string_view where);
// Checks and sets, recording `where` in o->given (an explicit request).
absl::Status SetOption(ClientOptions* o, const OptionSpec& spec, OptionValue value,
                       absl::string_view where);
// The C ABI's text for `spec`, given under `key`, as a value; INVALID_ARGUMENT
// "option KEY='TEXT': expected ..." when it does not parse. Not range-checked.
absl::StatusOr<OptionValue> ParseCText(const OptionSpec& spec, absl::string_view key,
                                       absl::string_view text);
// One option's value from the environment (environment.cc): the first of its
// variables that is set and not empty (the file it names, for file kinds),
// which *source then names; none when none is. INVALID_ARGUMENT naming the
// variable and the option when it does not parse. Not range-checked.
absl::StatusOr<std::optional<OptionValue>> OptionFromEnvironment(const OptionSpec& spec,
                                                                 absl::string_view* source);
// One C ABI key=value (gradex_create); unknown keys are INVALID_ARGUMENT.
absl::Status SetFromCKey(ClientOptions* o, absl::string_view key, absl::string_view text);
// Every option's value within its range (Client::Create, for C++ callers
// who set the fields themselves). Cross-option rules are Create's.
absl::Status CheckOptionValues(const ClientOptions& o);
// The rank asks for this value: given explicitly (o.given), or, set by a
// C++ caller, different from the default.
bool Asked(const ClientOptions& o, const OptionSpec& spec);
// The defaults that depend on other options, for options not given (the C
// ABI and Python call it once every option is set): start_iter is
// kAutoWarmupSteps under algorithm "auto" with dense probes on.
void ApplyDependentDefaults(ClientOptions* o);

// The README's table (markdown), and the markers around it there.
std::string OptionsMarkdown();
// Any table of specs in the same form (the PS worker's, ps/ps_option_table.h);
// default_text gives each spec's default in its text form.
std::string OptionsMarkdown(const std::vector<OptionSpec>& specs,
                            const std::function<std::string(const OptionSpec&)>& default_text);
inline constexpr absl::string_view kReadmeBegin =
    "<!-- options: generated by gradex-options --write README.md; do not edit -->";
inline constexpr absl::string_view kReadmeEnd = "<!-- options: end -->";

// What a tool writes: `table`, held in a file between the lines `begin` and
// `end`, made by `tool` from `source`.
struct MarkdownBlock {
  std::string table;
  absl::string_view begin = kReadmeBegin, end = kReadmeEnd;
  const char* tool = "gradex-options";
  const char* source = "services/client/option_table.cc";
};
// A tool's --markdown / --check FILE / --write FILE / --help over `block`:
// 0 done (or the same), 1 --check found it differs (the error names the
// fix, `tool --write FILE`), 2 usage or I/O.
int OptionsMarkdownTool(int argc, char** argv, const MarkdownBlock& block, const char* help);

}  // namespace gradex::client

#endif  // GRADEX_SERVICES_CLIENT_OPTION_TABLE_H_
