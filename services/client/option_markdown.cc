// The option table as the README's markdown table (gradex-options writes it
// between kReadmeBegin and kReadmeEnd).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/client/option_table.h"

namespace gradex::client {
namespace {

using T = OptionType;

}  // namespace

std::string OptionsMarkdown() {
  return OptionsMarkdown(OptionTable(), [](const OptionSpec& s) { return DefaultText(s); });
}

std::string OptionsMarkdown(const std::vector<OptionSpec>& specs,
                            const std::function<std::string(const OptionSpec&)>& default_text) {
  auto code = [](absl::string_view x) {
    return x.empty() ? std::string() : absl::StrCat("`", x, "`");
  };
  std::string out =
      "| option | Python keyword | C key | environment | default | values | plan | meaning |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const OptionSpec& s : specs) {
    std::vector<std::string> env;
    for (const OptionEnv& e : s.env) {
      env.push_back(absl::StrCat(code(e.name), e.kind == EnvKind::kValue ? "" : " (a file)"));
    }
    std::string def = default_text(s);
    if (s.type == T::kDuration) def = absl::StrCat(def, " ms");
    def = def.empty() ? "none" : code(def);
    std::string c_key(s.c_key);
    if (s.type == T::kParams) c_key = "param.NAME";
    std::string expected = ExpectedText(s);
    if (s.type == T::kBool) expected = "0/1 (Python: False/True)";
    if (s.type == T::kDuration) expected = absl::StrCat(expected, " (Python: seconds)");
    absl::StrAppend(&out, "| `", s.name, "` | ", code(s.py_keyword), " | ", code(c_key), " | ",
                    absl::StrJoin(env, ", "), " | ", def, " | ", expected, " | ",
                    s.plan_decided ? "yes" : "", " | ", s.description, " |\n");
  }
  return out;
}

}  // namespace gradex::client
