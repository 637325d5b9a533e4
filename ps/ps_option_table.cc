// The PS worker's option table (ps_option_table.h).
#include "ps/ps_option_table.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "absl/strings/str_cat.h"
#include "ps/dgs_layout.h"

namespace gradex::ps {
namespace {

// The client's option table types, which the macros below name.
using client::OptionValue;
using T = client::OptionType;

// The worker's field as the table's value type.
#define GRADEX_PS_FIELD(member, type)                                            \
  .get = [](const PsWorkerOptions& o) -> OptionValue { return type(o.member); }, \
  .set = [](PsWorkerOptions* o, OptionValue v) {                                 \
    o->member = static_cast<decltype(o->member)>(std::get<type>(std::move(v)));  \
  }

// A float field as the double its shortest decimal names (0.01f as 0.01), so
// that the table, the errors and the docs print what the user wrote.
double FloatValue(float f) {
  char text[32];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, static_cast<double>(f));
    if (std::strtof(text, nullptr) == f) return std::strtod(text, nullptr);
  }
  return f;
}

#define GRADEX_PS_FLOAT(member)                                                        \
  .get = [](const PsWorkerOptions& o) -> OptionValue { return FloatValue(o.member); }, \
  .set = [](PsWorkerOptions* o, OptionValue v) {                                       \
    o->member = static_cast<float>(std::get<double>(v));                               \
  }

// Below float's largest (3.40282e38), and short to print.
constexpr double kMaxFloat = 3.4e38;
// The coordinator's bound on ps.max_staleness (job_config.cc).
constexpr double kMaxStaleness = 4294967296.0;
constexpr double kDayMs = 86400000;

std::vector<PsOptionSpec> Build() {
  std::vector<PsOptionSpec> t;
  // The client's density range: the two densities mean the same fraction.
  t.push_back({.spec = {.name = "density",
                        .type = T::kDouble,
                        .range = client::FindOption("density")->range,
                        .env = {{"GRADEX_PS_DENSITY"}},
                        .c_key = "density",
                        .py_keyword = "density",
                        .example = "0.05",
                        .description = "fraction of each layer pushed and pulled per step; 1 is "
                                       "ASGD (dense both ways)"},
               GRADEX_PS_FLOAT(density)});
  t.push_back({.spec = {.name = "momentum",
                        .type = T::kDouble,
                        .range = client::OptionRange{0, 1, /*lo_open=*/true},
                        .env = {{"GRADEX_PS_MOMENTUM"}},
                        .c_key = "momentum",
                        .py_keyword = "momentum",
                        .example = "0.5",
                        .description = "SAMomentum's m in u = m·u + lr·(g + wd·w)"},
               GRADEX_PS_FLOAT(momentum)});
  t.push_back({.spec = {.name = "weight_decay",
                        .type = T::kDouble,
                        .range = client::OptionRange{0, kMaxFloat},
                        .env = {{"GRADEX_PS_WEIGHT_DECAY"}},
                        .c_key = "weight_decay",
                        .py_keyword = "weight_decay",
                        .example = "1e-04",
                        .description = "wd in u = m·u + lr·(g + wd·w)"},
               GRADEX_PS_FLOAT(weight_decay)});
  t.push_back({.spec = {.name = "lr0",
                        .type = T::kDouble,
                        .range = client::OptionRange{0, kMaxFloat},
                        .env = {{"GRADEX_PS_LR0"}},
                        .c_key = "lr0",
                        .py_keyword = "lr0",
                        .example = "0.1",
                        .description = "the reference lr of R = density·lr/lr0; 0: the first "
                                       "step's lr"},
               GRADEX_PS_FLOAT(lr0)});
  t.push_back({.spec = {.name = "max_staleness",
                        .type = T::kUint,
                        .range = client::OptionRange{0, kMaxStaleness},
                        .env = {{"GRADEX_PS_MAX_STALENESS"}},
                        .c_key = "max_staleness",
                        .py_keyword = "max_staleness",
                        .example = "7",
                        .description = "versions a worker may run ahead of its last pull before "
                                       "its step waits (embedded coordinator's job; 0 = "
                                       "unbounded, else at least workers - 1)"},
               GRADEX_PS_FIELD(max_staleness, uint64_t)});
  t.push_back({.spec = {.name = "server_shards",
                        .type = T::kUint,
                        .range = client::OptionRange{0, static_cast<double>(kDgsMaxShards)},
                        .env = {{"GRADEX_PS_SERVER_SHARDS"}},
                        .c_key = "server_shards",
                        .py_keyword = "server_shards",
                        .example = "4",
                        .description = "server shards of the embedded coordinator's job (0 = one "
                                       "per host)"},
               GRADEX_PS_FIELD(server_shards, uint64_t)});
  t.push_back({.spec = {.name = "snapshot_dir",
                        .type = T::kString,
                        .env = {{"GRADEX_PS_SNAPSHOT_DIR"}},
                        .c_key = "snapshot_dir",
                        .py_keyword = "snapshot_dir",
                        .example = "/tmp/gradex-ps",
                        .description = "where the server rank 0 hosts writes its snapshots (\"\" "
                                       "= none)"},
               GRADEX_PS_FIELD(snapshot_dir, std::string)});
  t.push_back({.spec = {.name = "snapshot_interval",
                        .type = T::kDuration,
                        .range = client::OptionRange{0, kDayMs},
                        .env = {{"GRADEX_PS_SNAPSHOT_INTERVAL_MS"}},
                        .c_key = "snapshot_interval_ms",
                        .py_keyword = "snapshot_interval_s",
                        .example = "5000",
                        .description = "how often the hosted server writes a snapshot"},
               .get = [](const PsWorkerOptions& o) -> OptionValue {
                 return static_cast<int64_t>(o.snapshot_interval.count());
               },
               .set =
                   [](PsWorkerOptions* o, client::OptionValue v) {
                     o->snapshot_interval = std::chrono::milliseconds(std::get<int64_t>(v));
                   }});
  return t;
}

template <typename Pred>
const PsOptionSpec* Find(Pred pred) {
  for (const PsOptionSpec& s : PsOptionTable()) {
    if (pred(s.spec)) return &s;
  }
  return nullptr;
}

}  // namespace

const std::vector<PsOptionSpec>& PsOptionTable() {
  static const std::vector<PsOptionSpec>* table = new std::vector<PsOptionSpec>(Build());
  return *table;
}

const PsOptionSpec* FindPsCKey(absl::string_view key) {
  return Find([&](const client::OptionSpec& s) { return !s.c_key.empty() && s.c_key == key; });
}

const PsOptionSpec* FindPsPyKeyword(absl::string_view keyword) {
  return Find([&](const client::OptionSpec& s) {
    return !s.py_keyword.empty() && s.py_keyword == keyword;
  });
}

absl::Status SetPsOption(PsWorkerOptions* o, const PsOptionSpec& spec, client::OptionValue value,
                         absl::string_view where) {
  if (absl::Status s = client::CheckOptionValue(spec.spec, value, where); !s.ok()) return s;
  spec.set(o, std::move(value));
  return absl::OkStatus();
}

absl::Status SetPsFromCKey(PsWorkerOptions* o, absl::string_view key, absl::string_view text) {
  const PsOptionSpec* s = FindPsCKey(key);
  if (s == nullptr) return client::SetFromCKey(&o->client, key, text);
  absl::StatusOr<client::OptionValue> v = client::ParseCText(s->spec, key, text);
  if (!v.ok()) return v.status();
  return SetPsOption(o, *s, *std::move(v), absl::StrCat("option ", key));
}

absl::Status ApplyPsEnvironment(PsWorkerOptions* o) {
  for (const PsOptionSpec& s : PsOptionTable()) {
    absl::string_view source;
    absl::StatusOr<std::optional<client::OptionValue>> value =
        client::OptionFromEnvironment(s.spec, &source);
    if (!value.ok()) return value.status();
    if (!value->has_value()) continue;
    if (absl::Status st = SetPsOption(o, s, **std::move(value), source); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(st.message(), " (option ", s.spec.name, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPsOptionValues(const PsWorkerOptions& o) {
  for (const PsOptionSpec& s : PsOptionTable()) {
    if (absl::Status st = client::CheckOptionValue(s.spec, s.get(o), s.spec.name); !st.ok())
      return st;
  }
  return absl::OkStatus();
}

std::string PsOptionsMarkdown() {
  std::vector<client::OptionSpec> specs;
  for (const PsOptionSpec& s : PsOptionTable()) specs.push_back(s.spec);
  return client::OptionsMarkdown(specs, [](const client::OptionSpec& spec) {
    const PsOptionSpec* s = Find([&](const client::OptionSpec& x) { return x.name == spec.name; });
    return client::FormatValue(spec, s->get(PsWorkerOptions{}));
  });
}

}  // namespace gradex::ps
