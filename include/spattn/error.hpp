// spattn/error.hpp - the one exception type of the library.
//
// Every rejected input raises spattn::Error whose message names the parameter
// and the offending value, e.g. "window_left must be >= 0, got -3". The CLI turns
// it into a one-line message and exit code 2.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace spattn {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
}  // namespace detail

// Builds a message from its pieces and throws spattn::Error.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  detail::append_all(os, parts...);
  throw Error(os.str());
}

// Throws unless `condition` holds; the remaining arguments form the message.
template <typename... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace spattn
