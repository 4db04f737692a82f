// tools/spattn/json_writer.hpp - a small streaming JSON writer.
//
// Writes indented JSON to a stream: begin/end objects and arrays, keys and
// scalar values, with commas placed automatically. Strings are escaped;
// non-finite numbers become null. Used for `spattn run --json` and the
// benchmark results files.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace spattn::cli {

class JsonWriter {
 public:
  explicit JsonWriter(std::ostream& os) : os_(os) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(const std::string& name);

  JsonWriter& value(const std::string& s);
  JsonWriter& value(const char* s) { return value(std::string(s)); }
  JsonWriter& value(int64_t x);
  JsonWriter& value(int x) { return value(static_cast<int64_t>(x)); }
  JsonWriter& value(double x);
  JsonWriter& value(bool b);
  JsonWriter& null();

  template <typename T>
  JsonWriter& field(const std::string& name, const T& v) {
    key(name);
    return value(v);
  }

 private:
  void before_value();
  void newline();

  std::ostream& os_;
  std::vector<bool> has_items_;  // per open container
  bool after_key_ = false;
};

std::string json_escape(const std::string& s);

}  // namespace spattn::cli
