// The --markdown / --check / --write tool over an option table's markdown
// (gradex-options for the client's, gradex-ps-options for the PS worker's).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "services/client/option_table.h"
#include "version/version.h"

namespace gradex::client {
namespace {

bool Read(const char* path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

}  // namespace

int OptionsMarkdownTool(int argc, char** argv, const MarkdownBlock& block, const char* help) {
  const std::string& table = block.table;
  const char* tool = block.tool;
  const std::string begin_marker(block.begin), end_marker(block.end);
  if (version::PrintVersionIfAsked(argc, argv, tool)) return 0;
  if (argc == 1 || (argc == 2 && std::strcmp(argv[1], "--markdown") == 0)) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  if (argc == 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(help, stdout);
    return 0;
  }
  const bool check = argc == 3 && std::strcmp(argv[1], "--check") == 0;
  const bool write = argc == 3 && std::strcmp(argv[1], "--write") == 0;
  if (!check && !write) {
    std::fputs(help, stderr);
    return 2;
  }
  std::string text;
  if (!Read(argv[2], &text)) {
    std::fprintf(stderr, "%s: cannot read %s\n", tool, argv[2]);
    return 2;
  }
  const size_t begin = text.find(begin_marker);
  const size_t end = text.find(end_marker, begin == std::string::npos ? 0 : begin);
  if (begin == std::string::npos || end == std::string::npos || end < begin) {
    std::fprintf(stderr, "%s: %s has no '%s' ... '%s' block\n", tool, argv[2], begin_marker.c_str(),
                 end_marker.c_str());
    return 2;
  }
  const size_t from = begin + begin_marker.size() + 1;  // after the marker's line
  const std::string held = text.substr(from, end - from);
  if (check) {
    if (held == table) return 0;
    std::fprintf(stderr,
                 "%s: the option table in %s differs from the code's (%s). Fix: %s --write %s\n"
                 "--- the code's table:\n%s",
                 tool, argv[2], block.source, tool, argv[2], table.c_str());
    return 1;
  }
  text.replace(from, end - from, table);
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out << text;
  return out.good() ? 0 : 2;
}

}  // namespace gradex::client
