// gradex-options: the client's option table (option_table.h) as the
// README's markdown table, and the check that the README holds it.
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
    "  --help        this text\n"
    "  --version     print the version and exit\n";

}  // namespace

int main(int argc, char** argv) {
  return gradex::client::OptionsMarkdownTool(argc, argv, {gradex::client::OptionsMarkdown()},
                                             kHelp);
}
