#include "bench/rank_report.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gradex::bench {
namespace {

constexpr char kMagic[] = "GXR1";
constexpr size_t kFields = 22;  // magic .. END

// Tabs and newlines would break the framing; messages are for humans anyway.
std::string Clean(const std::string& s) {
  std::string out = s;
  for (char& c : out) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return out.empty() ? "-" : out;
}

std::string Unclean(absl::string_view s) { return s == "-" ? "" : std::string(s); }

// %a round-trips doubles exactly.
std::string Hex(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", d);
  return buf;
}

std::string Doubles(const std::vector<double>& v) {
  if (v.empty()) return "-";
  std::vector<std::string> parts;
  for (double d : v) parts.push_back(Hex(d));
  return absl::StrJoin(parts, ",");
}

std::string U64s(const std::vector<uint64_t>& v) { return v.empty() ? "-" : absl::StrJoin(v, ","); }

bool ParseDouble(absl::string_view s, double* out) {
  std::string str(s);
  char* end = nullptr;
  *out = std::strtod(str.c_str(), &end);
  return end == str.c_str() + str.size() && !str.empty();
}

bool ParseDoubles(absl::string_view s, std::vector<double>* out) {
  out->clear();
  if (s == "-") return true;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    double d;
    if (!ParseDouble(p, &d)) return false;
    out->push_back(d);
  }
  return true;
}

bool ParseU64s(absl::string_view s, std::vector<uint64_t>* out) {
  out->clear();
  if (s == "-") return true;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    uint64_t x;
    if (!absl::SimpleAtoi(p, &x)) return false;
    out->push_back(x);
  }
  return true;
}

// "name=hex,name=hex" ("-" when empty). Detail names are identifiers; one
// that could not be parsed back is left out.
std::string Details(const std::vector<std::pair<std::string, double>>& d) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : d) {
    if (name.empty() || name.find_first_of("=,\t\n\r") != std::string::npos) continue;
    parts.push_back(absl::StrCat(name, "=", Hex(value)));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

bool ParseDetails(absl::string_view s, std::vector<std::pair<std::string, double>>* out) {
  out->clear();
  if (s == "-") return true;
  for (absl::string_view p : absl::StrSplit(s, ',')) {
    const size_t eq = p.find('=');
    double v;
    if (eq == 0 || eq == absl::string_view::npos || !ParseDouble(p.substr(eq + 1), &v)) {
      return false;
    }
    out->emplace_back(std::string(p.substr(0, eq)), v);
  }
  return true;
}

}  // namespace

std::string SerializeReport(const RankAlgoReport& r) {
  return absl::StrCat(
      kMagic, "\t", r.rank, "\t", Clean(r.algo), "\t", r.teams, "\t", Clean(r.skip_note), "\t",
      Clean(r.error), "\t", Doubles(r.call_s), "\t", Doubles(r.selection_s), "\t",
      Doubles(r.communication_s), "\t", Doubles(r.reduction_s), "\t", U64s(r.sent_bytes), "\t",
      U64s(r.recv_bytes), "\t", r.result_nnz, "\t", r.result_capacity, "\t", r.result_hash, "\t",
      r.consistent ? 1 : 0, "\t", r.bounds_ok ? 1 : 0, "\t", r.conservation_checked ? 1 : 0, "\t",
      Hex(r.conservation_max_abs_err), "\t", Hex(r.max_abs_sum), "\t", Details(r.details), "\tEND");
}

absl::StatusOr<RankAlgoReport> ParseReport(const std::string& line) {
  std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
  if (f.size() != kFields || f[0] != kMagic || f[kFields - 1] != "END") {
    return absl::DataLossError(absl::StrCat("malformed rank report: '", line.substr(0, 80), "'"));
  }
  RankAlgoReport r;
  int b[3];
  bool ok = absl::SimpleAtoi(f[1], &r.rank) && absl::SimpleAtoi(f[3], &r.teams);
  r.algo = Unclean(f[2]);
  r.skip_note = Unclean(f[4]);
  r.error = Unclean(f[5]);
  ok = ok && ParseDoubles(f[6], &r.call_s) && ParseDoubles(f[7], &r.selection_s) &&
       ParseDoubles(f[8], &r.communication_s) && ParseDoubles(f[9], &r.reduction_s) &&
       ParseU64s(f[10], &r.sent_bytes) && ParseU64s(f[11], &r.recv_bytes) &&
       absl::SimpleAtoi(f[12], &r.result_nnz) && absl::SimpleAtoi(f[13], &r.result_capacity) &&
       absl::SimpleAtoi(f[14], &r.result_hash) && absl::SimpleAtoi(f[15], &b[0]) &&
       absl::SimpleAtoi(f[16], &b[1]) && absl::SimpleAtoi(f[17], &b[2]) &&
       ParseDouble(f[18], &r.conservation_max_abs_err) && ParseDouble(f[19], &r.max_abs_sum) &&
       ParseDetails(f[20], &r.details);
  if (!ok) {
    return absl::DataLossError(absl::StrCat("malformed rank report: '", line.substr(0, 80), "'"));
  }
  r.consistent = b[0] != 0;
  r.bounds_ok = b[1] != 0;
  r.conservation_checked = b[2] != 0;
  return r;
}

}  // namespace gradex::bench
