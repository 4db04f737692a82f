// tools/spattn/json_writer.cpp - a small streaming JSON writer (see json_writer.hpp).
#include "json_writer.hpp"

#include <cmath>
#include <cstdio>

#include "spattn/error.hpp"

namespace spattn::cli {

std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(ch));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

void JsonWriter::newline() { os_ << '\n' << std::string(2 * has_items_.size(), ' '); }

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (has_items_.empty()) return;
  if (has_items_.back()) os_ << ',';
  has_items_.back() = true;
  newline();
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  os_ << '{';
  has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  require(!has_items_.empty(), "JsonWriter: end_object without begin_object");
  const bool items = has_items_.back();
  has_items_.pop_back();
  if (items) newline();
  os_ << '}';
  if (has_items_.empty()) os_ << '\n';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  os_ << '[';
  has_items_.push_back(false);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  require(!has_items_.empty(), "JsonWriter: end_array without begin_array");
  const bool items = has_items_.back();
  has_items_.pop_back();
  if (items) newline();
  os_ << ']';
  return *this;
}

JsonWriter& JsonWriter::key(const std::string& name) {
  before_value();
  os_ << json_escape(name) << ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(const std::string& s) {
  before_value();
  os_ << json_escape(s);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t x) {
  before_value();
  os_ << x;
  return *this;
}

JsonWriter& JsonWriter::value(double x) {
  before_value();
  if (!std::isfinite(x)) {
    os_ << "null";
    return *this;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  os_ << buf;
  return *this;
}

JsonWriter& JsonWriter::value(bool b) {
  before_value();
  os_ << (b ? "true" : "false");
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  os_ << "null";
  return *this;
}

}  // namespace spattn::cli
