// gradex-options: the client's option table (option_table.h) as the
// README's markdown table, and the check that the README holds it.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "services/client/option_table.h"

namespace {

constexpr char kHelp[] =
    "usage: gradex-options [--markdown | --check FILE | --write FILE]\n"
    "\n"
    "The gradex client's options (GradexState keywords, C ABI keys, environment\n"
    "variables), one table declared in services/client/option_table.cc.\n"
    "\n"
    "  --markdown    print the table (the default)\n"
    "  --check FILE  exit 1 when FILE's table (between the markers\n"
    "                '<!-- options: generated ...' and '<!-- options: end -->')\n"
    "                differs from the code's; the fix: --write FILE\n"
    "  --write FILE  replace FILE's table with the code's\n"
    "  --help        this text\n";

bool Read(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using gradex::client::kReadmeBegin;
  using gradex::client::kReadmeEnd;
  const std::string table = gradex::client::OptionsMarkdown();
  if (argc == 1 || (argc == 2 && std::strcmp(argv[1], "--markdown") == 0)) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const bool check = argc == 3 && std::strcmp(argv[1], "--check") == 0;
  const bool write = argc == 3 && std::strcmp(argv[1], "--write") == 0;
  if (!check && !write) {
    std::fputs(kHelp, stderr);
    return 2;
  }
  std::string text;
  if (!Read(argv[2], &text)) {
    std::fprintf(stderr, "gradex-options: cannot read %s\n", argv[2]);
    return 2;
  }
  const size_t begin = text.find(std::string(kReadmeBegin));
  const size_t end = text.find(std::string(kReadmeEnd));
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    std::fprintf(stderr, "gradex-options: %s has no '%s' ... '%s' block\n", argv[2],
                 std::string(kReadmeBegin).c_str(), std::string(kReadmeEnd).c_str());
    return 2;
  }
  const size_t from = begin + kReadmeBegin.size() + 1;  // after the marker's line
  const std::string held = text.substr(from, end - from);
  if (check) {
    if (held == table) return 0;
    std::fprintf(stderr,
                 "gradex-options: the option table in %s differs from the code's "
                 "(services/client/option_table.cc). Fix: gradex-options --write %s\n"
                 "--- the code's table:\n%s",
                 argv[2], argv[2], table.c_str());
    return 1;
  }
  text.replace(from, end - from, table);
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out << text;
  return out.good() ? 0 : 2;
}
