// tools/spattn/commands.hpp - the subcommands of the spattn tool.
//
// Each subcommand has a flag table (shown by `spattn NAME --help`) and an
// entry point that receives the parsed flags and returns the exit code:
// 0 on success, 1 when a requested check fails. Bad input throws
// spattn::Error, which main turns into exit code 2.
#pragma once

#include <string>
#include <vector>

#include "args.hpp"

namespace spattn::cli {

struct Command {
  std::string name;
  std::string summary;  // one line for `spattn --help`
  std::string usage;    // the head of `spattn NAME --help`
  std::vector<FlagSpec> flags;
  int (*main)(const Args& args);
};

Command run_command();
Command mask_command();
Command bench_command();

}  // namespace spattn::cli
