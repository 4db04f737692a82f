// tools/spattn/main.cpp - entry point of the spattn command-line tool.
//
// `spattn run | mask | bench [flags]`, `spattn --help`, `spattn --version`.
// Dispatches to the subcommand; any error (spattn::Error for bad input, or any
// other std::exception) becomes one line `spattn: error: <message>` on stderr
// and exit code 2; library parameter names in it become the flags that set
// them (flag_names.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flag_names.hpp"
#include "spattn/error.hpp"

#ifndef SPATTN_VERSION_STRING
#error "SPATTN_VERSION_STRING must be defined by the build"
#endif

namespace spattn::cli {
namespace {

constexpr int kExitError = 2;
constexpr size_t kSummaryColumn = 8;  // where `spattn --help` starts the command summaries

std::vector<Command> all_commands() { return {run_command(), mask_command(), bench_command()}; }

void print_help(std::ostream& os) {
  os << "spattn " << SPATTN_VERSION_STRING << " - exact sparse attention\n\n"
     << "usage: spattn COMMAND [flags]      (spattn COMMAND --help for its flags)\n\n"
     << "commands:\n";
  for (const Command& c : all_commands())
    os << "  " << c.name << std::string(kSummaryColumn - std::min(c.name.size(), kSummaryColumn - 1), ' ')
       << c.summary << "\n";
  os << "\nflags take a value as `--flag value` or `--flag=value`.\n";
}

bool wants_help(const std::vector<std::string>& words) {
  for (const std::string& w : words)
    if (w == "--help" || w == "-h") return true;
  return false;
}

int dispatch(const std::vector<std::string>& words) {
  require(!words.empty(), "no command given (see spattn --help)");
  if (words[0] == "--help" || words[0] == "-h" || words[0] == "help") {
    print_help(std::cout);
    return 0;
  }
  if (words[0] == "--version") {
    std::cout << "spattn " << SPATTN_VERSION_STRING << "\n";
    return 0;
  }
  for (const Command& c : all_commands()) {
    if (c.name != words[0]) continue;
    const std::vector<std::string> rest(words.begin() + 1, words.end());
    if (wants_help(rest)) {
      std::cout << c.usage << "\n\nflags:\n" << format_flag_help(c.flags);
      return 0;
    }
    const Args args(rest, c.flags, "spattn " + c.name);
    try {
      return c.main(args);
    } catch (const Error& e) {
      throw Error(name_flags(e.what(), args));
    }
  }
  fail("unknown command '", words[0], "' (commands: run, mask, bench; see spattn --help)");
}

// OpenMP threads that spin while they wait hold their core: on a loaded
// machine a worker preempted from the other core then waits for a scheduler
// tick to get back, and a 0.6 ms call measures 4, 8 or 16 ms
// (docs/cli.md, "Timing"). Passive waiting costs nothing measurable here, so
// the tool runs with OMP_WAIT_POLICY=PASSIVE unless the caller chose a policy:
// libgomp reads it at start-up, hence the re-execution. On failure the tool
// goes on with the default policy.
void prefer_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0) return;
  execv("/proc/self/exe", argv);
}

// Keeps the message to one line.
std::string one_line(std::string message) {
  for (char& ch : message)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return message;
}

}  // namespace
}  // namespace spattn::cli

int main(int argc, char** argv) {
  using namespace spattn::cli;
  prefer_passive_openmp_wait(argv);
  try {
    return dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::bad_alloc&) {
    std::cout.flush();
    std::cerr << "spattn: error: out of memory (the problem is too large for this machine)" << std::endl;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "spattn: error: " << one_line(e.what()) << std::endl;
  } catch (...) {
    std::cout.flush();
    std::cerr << "spattn: error: unknown failure" << std::endl;
  }
  return kExitError;
}
