// gradex-ps-options: the PS worker's option table (ps_option_table.h) as
// docs/dgs.md's markdown table, and the check that docs/dgs.md holds it.
#include "ps/ps_option_table.h"

namespace {

constexpr char kHelp[] =
    "usage: gradex-ps-options [--markdown | --check FILE | --write FILE]\n"
    "\n"
    "The gradex parameter-server worker's own options (gradex._C.PsWorker and\n"
    "DGSOptimizer keywords, gradex_ps_create keys, GRADEX_PS_* variables), one\n"
    "table declared in ps/ps_option_table.cc. Its client options (job, rank, ...)\n"
    "are gradex-options'.\n"
    "\n"
    "  --markdown    print the table (the default)\n"
    "  --check FILE  exit 1 when FILE's table (between the markers\n"
    "                '<!-- ps options: generated ...' and '<!-- ps options: end -->')\n"
    "                differs from the code's; the fix: --write FILE\n"
    "  --write FILE  replace FILE's table with the code's\n"
    "  --help        this text\n"
    "  --version     print the version and exit\n";

}  // namespace

int main(int argc, char** argv) {
  return gradex::client::OptionsMarkdownTool(argc, argv,
                                             {.table = gradex::ps::PsOptionsMarkdown(),
                                              .begin = gradex::ps::kPsDocBegin,
                                              .end = gradex::ps::kPsDocEnd,
                                              .tool = "gradex-ps-options",
                                              .source = "ps/ps_option_table.cc"},
                                             kHelp);
}
