// tools/spattn/args.cpp - the command-line flag parser (see args.hpp).
#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "spattn/error.hpp"

namespace spattn::cli {

namespace {

std::string dashed(const std::string& name) { return "--" + name; }

}  // namespace

Args::Args(const std::vector<std::string>& tokens, std::vector<FlagSpec> specs, std::string command)
    : specs_(std::move(specs)), command_(std::move(command)) {
  for (size_t at = 0; at < tokens.size(); ++at) {
    const std::string& word = tokens[at];
    require(word.size() > 2 && word.compare(0, 2, "--") == 0, command_, ": unexpected argument '",
            word, "' (flags start with --)");
    std::string name = word.substr(2);
    std::optional<std::string> value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const FlagSpec& s = spec(name);
    require(values_.count(name) == 0, command_, ": flag --", name, " given twice");
    if (s.kind == FlagKind::Switch) {
      require(!value, command_, ": flag --", name, " takes no value, got '", value.value_or(""), "'");
      value = "";
    } else if (!value) {
      require(at + 1 < tokens.size() && tokens[at + 1].compare(0, 2, "--") != 0, command_,
              ": flag --", name, " needs a value (", s.value_name, ")");
      value = tokens[++at];
    }
    values_[name] = *value;
    order_.push_back(name);
  }
}

const FlagSpec& Args::spec(const std::string& name) const {
  for (const FlagSpec& s : specs_)
    if (s.name == name) return s;
  fail(command_, ": unknown flag --", name, " (see ", command_, " --help)");
}

std::optional<std::string> Args::raw(const std::string& name) const {
  spec(name);  // a typo in the tool itself must not pass silently
  used_.insert(name);
  const auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

bool Args::has(const std::string& name) const { return raw(name).has_value(); }

bool Args::flag(const std::string& name) const {
  require(spec(name).kind == FlagKind::Switch, command_, ": --", name, " is not a switch");
  return raw(name).has_value();
}

std::optional<std::string> Args::find_string(const std::string& name) const {
  std::optional<std::string> v = raw(name);
  if (v) require(!v->empty(), "--", name, " needs a non-empty value");
  return v;
}

std::string Args::get_string(const std::string& name, const std::string& fallback) const {
  return find_string(name).value_or(fallback);
}

std::string Args::get_choice(const std::string& name, const std::string& fallback,
                             const std::vector<std::string>& choices) const {
  const std::string v = get_string(name, fallback);
  for (const std::string& c : choices)
    if (c == v) return v;
  std::ostringstream all;
  for (size_t n = 0; n < choices.size(); ++n) all << (n ? ", " : "") << choices[n];
  fail("--", name, " must be one of ", all.str(), "; got '", v, "'");
}

std::optional<int64_t> Args::find_int(const std::string& name, int64_t min, int64_t max) const {
  const std::optional<std::string> v = find_string(name);
  if (!v) return std::nullopt;
  return parse_int(*v, dashed(name), min, max);
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  return find_int(name, min, max).value_or(fallback);
}

double Args::get_double(const std::string& name, double fallback, double min, double max) const {
  const std::optional<std::string> v = find_string(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  require(end != v->c_str() && *end == '\0' && errno == 0 && std::isfinite(x), "--", name,
          " expects a number, got '", *v, "'");
  require(x >= min && x <= max, "--", name, " must be in [", min, ", ", max, "], got ", *v);
  return x;
}

std::optional<std::vector<int64_t>> Args::find_int_list(const std::string& name, int64_t min,
                                                        int64_t max) const {
  const std::optional<std::string> v = find_string(name);
  if (!v) return std::nullopt;
  std::vector<int64_t> out;
  for (const std::string& item : split_list(*v, dashed(name)))
    out.push_back(parse_int(item, dashed(name), min, max));
  return out;
}

std::optional<std::vector<std::string>> Args::find_list(const std::string& name) const {
  const std::optional<std::string> v = find_string(name);
  if (!v) return std::nullopt;
  return split_list(*v, dashed(name));
}

std::string Args::typed(const std::vector<std::string>& names) const {
  std::string text;
  for (const std::string& name : names) {
    const auto it = values_.find(name);
    if (it == values_.end()) continue;
    text += (text.empty() ? "" : " ") + dashed(name) + (it->second.empty() ? "" : " " + it->second);
  }
  return text;
}

void Args::require_all_used(const std::string& why) const {
  for (const std::string& name : order_)
    require(used_.count(name) != 0, "flag --", name, " does not apply ", why);
}

int64_t parse_int(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(text.c_str(), &end, 10);
  require(!text.empty() && end != text.c_str() && *end == '\0', what, " expects an integer, got '",
          text, "'");
  require(errno != ERANGE, what, " is out of range: ", text);
  require(x >= min, what, " must be >= ", min, ", got ", x);
  require(x <= max, what, " must be <= ", max, ", got ", x);
  return static_cast<int64_t>(x);
}

std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    require(!item.empty(), what, " has an empty item in '", text, "'");
    items.push_back(item);
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

std::string format_flag_help(const std::vector<FlagSpec>& specs) {
  std::ostringstream os;
  for (const FlagSpec& s : specs) {
    std::string left = "  --" + s.name;
    if (s.kind == FlagKind::Value) left += " " + s.value_name;
    os << left;
    const size_t column = 30;
    if (left.size() + 2 > column) {
      os << "\n" << std::string(column, ' ');
    } else {
      os << std::string(column - left.size(), ' ');
    }
    os << s.help << "\n";
  }
  return os.str();
}

}  // namespace spattn::cli
