// tools/spattn/flag_names.hpp - library messages in the words of the command line.
//
// The library names its parameters as its API does (random_blocks, summary,
// k_len, tau); the tool's user typed flags (--random-blocks, --summary, --seq,
// --tau). main passes every error message through name_flags, which replaces
// each library parameter name standing as a word of its own (after a space,
// '(' or ',' or at the start; before a space, ')', ',', ':', '[', '=' or the end;
// never inside '...' quotes, nor as the value right after a flag, as in
// "--pattern topk") with the flag that sets it for this command.
#pragma once

#include <string>

#include "args.hpp"

namespace spattn::cli {

// `message` with library parameter names replaced by the flags of `args`'s command.
std::string name_flags(const std::string& message, const Args& args);

}  // namespace spattn::cli
