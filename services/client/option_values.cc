// Reading, checking, formatting and setting an option's value by its spec
// (the C ABI's and the environment's text, the ranges, ClientOptions::given).
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "services/client/option_table.h"

namespace gradex::client {
namespace {

using T = OptionType;

bool IsParamName(absl::string_view s) {
  if (s.empty() || s.size() > catalog::kMaxParamNameBytes) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

std::string Bound(double x) { return FormatNumber(x); }

absl::Status Refuse(absl::string_view where, absl::string_view value, const std::string& expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, "='", value.substr(0, 64), "': expected ", expected));
}

}  // namespace

std::string ExpectedText(const OptionSpec& s) {
  if (s.range) {
    const OptionRange& r = *s.range;
    const std::string interval =
        absl::StrCat(r.lo_open ? "(" : "[", Bound(r.lo), ", ", Bound(r.hi), r.hi_open ? ")" : "]");
    switch (s.type) {
      case T::kDouble:
        return absl::StrCat("a number in ", interval);
      case T::kDuration:
        return absl::StrCat("milliseconds in ", interval);
      default:
        return absl::StrCat("an integer in ", interval);
    }
  }
  switch (s.type) {
    case T::kBool:
      return "0 or 1";
    case T::kParams:
      return "a parameter name of the catalog (1..64 bytes) and a finite number";
    default:
      return s.valid != nullptr ? std::string(s.expected) : "any text";
  }
}

std::string FormatValue(const OptionSpec& s, const OptionValue& v) {
  switch (s.type) {
    case T::kString:
      return std::get<std::string>(v);
    case T::kInt:
    case T::kDuration:
      return absl::StrCat(std::get<int64_t>(v));
    case T::kUint:
      return absl::StrCat(std::get<uint64_t>(v));
    case T::kDouble:
      return FormatNumber(std::get<double>(v));
    case T::kBool:
      return std::get<bool>(v) ? "1" : "0";
    case T::kParams: {
      std::vector<std::string> parts;
      for (const auto& [name, x] : std::get<catalog::ParamValues>(v)) {
        parts.push_back(absl::StrCat(name, "=", FormatNumber(x)));
      }
      return absl::StrJoin(parts, ",");
    }
  }
  return "";
}

std::string FormatNumber(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), x);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(x);
}

std::string DefaultText(const OptionSpec& s) { return FormatValue(s, s.get(ClientOptions{})); }

absl::StatusOr<OptionValue> ParseOptionText(const OptionSpec& s, absl::string_view text) {
  auto bad = [&] { return absl::InvalidArgumentError(ExpectedText(s)); };
  switch (s.type) {
    case T::kString:
      return OptionValue(std::string(text));
    case T::kInt:
    case T::kDuration: {
      int64_t x;
      if (!absl::SimpleAtoi(text, &x)) return bad();
      return OptionValue(x);
    }
    case T::kUint: {
      uint64_t x;
      if (!absl::SimpleAtoi(text, &x)) return bad();
      return OptionValue(x);
    }
    case T::kDouble: {
      double x;
      if (!absl::SimpleAtod(text, &x)) return bad();
      return OptionValue(x);
    }
    case T::kBool:
      if (text != "0" && text != "1") return bad();
      return OptionValue(text == "1");
    case T::kParams: {
      catalog::ParamValues p;
      for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, '=');
        double x;
        if (!absl::SimpleAtod(kv.second, &x)) return bad();
        p[std::string(kv.first)] = x;
      }
      return OptionValue(std::move(p));
    }
  }
  return bad();
}

absl::Status CheckOptionValue(const OptionSpec& s, const OptionValue& v, absl::string_view where) {
  if (s.range) {
    double x = 0;
    if (s.type == T::kDouble) x = std::get<double>(v);
    if (s.type == T::kInt || s.type == T::kDuration) x = static_cast<double>(std::get<int64_t>(v));
    if (s.type == T::kUint) x = static_cast<double>(std::get<uint64_t>(v));
    const OptionRange& r = *s.range;
    const bool in = std::isfinite(x) && (r.lo_open ? x > r.lo : x >= r.lo) &&
                    (r.hi_open ? x < r.hi : x <= r.hi);
    if (!in) return Refuse(where, FormatValue(s, v), ExpectedText(s));
  }
  if (s.valid != nullptr && !s.valid(std::get<std::string>(v))) {
    return Refuse(where, std::get<std::string>(v), ExpectedText(s));
  }
  if (s.type == T::kParams) {
    const auto& p = std::get<catalog::ParamValues>(v);
    if (p.size() > catalog::kMaxParams) {
      return Refuse(where, FormatValue(s, v),
                    absl::StrCat("at most ", catalog::kMaxParams, " parameters"));
    }
    for (const auto& [name, x] : p) {
      if (!IsParamName(name) || !std::isfinite(x)) {
        return Refuse(absl::StrCat(where, ".", name.substr(0, 64)), FormatNumber(x),
                      ExpectedText(s));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SetOption(ClientOptions* o, const OptionSpec& s, OptionValue v,
                       absl::string_view where) {
  if (absl::Status st = CheckOptionValue(s, v, where); !st.ok()) return st;
  s.set(o, std::move(v));
  o->given[std::string(s.name)] = std::string(where);
  return absl::OkStatus();
}

absl::Status SetFromCKey(ClientOptions* o, absl::string_view key, absl::string_view text) {
  const OptionSpec* s = FindCKey(key);
  if (s == nullptr) {
    std::vector<absl::string_view> keys;
    for (const OptionSpec& x : OptionTable()) {
      if (!x.c_key.empty()) keys.push_back(x.type == T::kParams ? "param.NAME" : x.c_key);
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown option '", key.substr(0, 64),
                                                   "'; known: ", absl::StrJoin(keys, ", ")));
  }
  const std::string where = absl::StrCat("option ", key.substr(0, 64));
  if (s->type == T::kParams) {
    double x;
    if (!absl::SimpleAtod(text, &x)) return Refuse(where, text, "a number");
    catalog::ParamValues p = o->params;
    p[std::string(key.substr(s->c_key.size()))] = x;
    return SetOption(o, *s, std::move(p), where);
  }
  absl::StatusOr<OptionValue> v = ParseCText(*s, key, text);
  if (!v.ok()) return v.status();
  return SetOption(o, *s, *std::move(v), where);
}

absl::StatusOr<OptionValue> ParseCText(const OptionSpec& s, absl::string_view key,
                                       absl::string_view text) {
  absl::StatusOr<OptionValue> v = ParseOptionText(s, text);
  if (!v.ok()) {
    return Refuse(absl::StrCat("option ", key.substr(0, 64)), text,
                  std::string(v.status().message()));
  }
  return v;
}

absl::Status CheckOptionValues(const ClientOptions& o) {
  for (const OptionSpec& s : OptionTable()) {
    if (absl::Status st = CheckOptionValue(s, s.get(o), s.name); !st.ok()) return st;
  }
  return absl::OkStatus();
}

void ApplyDependentDefaults(ClientOptions* o) {
  if (o->algorithm == "auto" && o->dense_probe_period > 0 && !o->given.contains("start_iter")) {
    o->start_iter = kAutoWarmupSteps;
  }
}

bool Asked(const ClientOptions& o, const OptionSpec& s) {
  return o.given.contains(std::string(s.name)) ||
         FormatValue(s, s.get(o)) != FormatValue(s, s.get(ClientOptions{}));
}

}  // namespace gradex::client
