// tools/spattn/args.hpp - the command-line flag parser of the spattn tool.
//
// Each subcommand declares its flags as a table of FlagSpec (name, whether it
// takes a value, a help line). Args parses `--flag value` and `--flag=value`
// against that table and rejects, with spattn::Error naming the flag: unknown
// flags, missing values, values given to switches, repeated flags and stray
// positional words. Typed getters check syntax, overflow and range. Every
// getter records the flag as read, so a command can reject flags that were
// given but do not apply (require_all_used), e.g. --stride for a sliding window.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace spattn::cli {

enum class FlagKind { Switch, Value };

struct FlagSpec {
  std::string name;        // without the leading "--"
  FlagKind kind = FlagKind::Value;
  std::string value_name;  // placeholder shown in help, e.g. "L"
  std::string help;
};

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

class Args {
 public:
  // Parses `tokens` (the words after the subcommand) against `specs`.
  // `command` names the subcommand in error messages, e.g. "spattn run".
  Args(const std::vector<std::string>& tokens, std::vector<FlagSpec> specs, std::string command);

  const std::string& command() const { return command_; }
  const std::vector<FlagSpec>& specs() const { return specs_; }

  // Was the flag given? (Reading it this way counts as using it.)
  bool has(const std::string& name) const;
  // A switch: true when given.
  bool flag(const std::string& name) const;

  std::optional<std::string> find_string(const std::string& name) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  // The value must be one of `choices`.
  std::string get_choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const;

  // Integers in [min, max]; syntax and overflow are checked.
  std::optional<int64_t> find_int(const std::string& name, int64_t min = 0,
                                  int64_t max = kInt64Max) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min = 0,
                  int64_t max = kInt64Max) const;
  // A finite number in [min, max].
  double get_double(const std::string& name, double fallback, double min, double max) const;

  // Comma-separated lists; empty items are errors.
  std::optional<std::vector<int64_t>> find_int_list(const std::string& name, int64_t min = 0,
                                                    int64_t max = kInt64Max) const;
  std::optional<std::vector<std::string>> find_list(const std::string& name) const;

  // The flags among `names` that were given, as typed: "--seq 4096 --heads 8".
  // (Names this command does not take are skipped; nothing counts as read.)
  std::string typed(const std::vector<std::string>& names) const;

  // Throws unless every given flag was read; `why` completes "--x does not apply ...".
  void require_all_used(const std::string& why) const;

 private:
  const FlagSpec& spec(const std::string& name) const;
  std::optional<std::string> raw(const std::string& name) const;

  std::vector<FlagSpec> specs_;
  std::string command_;
  std::map<std::string, std::string> values_;  // switches map to ""
  std::vector<std::string> order_;             // flags in the order given
  mutable std::set<std::string> used_;
};

// Parses a whole word as a 64-bit integer in [min, max]; `what` names it in errors.
int64_t parse_int(const std::string& text, const std::string& what, int64_t min = 0,
                  int64_t max = kInt64Max);
// Splits "a,b,c" into its items; empty items are errors naming `what`.
std::vector<std::string> split_list(const std::string& text, const std::string& what);

// Help text of a flag table, one flag a line.
std::string format_flag_help(const std::vector<FlagSpec>& specs);

}  // namespace spattn::cli
