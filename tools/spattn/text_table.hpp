// tools/spattn/text_table.hpp - aligned text tables and number formatting for
// the tool's human-readable output.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace spattn::cli {

// Columns are right-aligned except the first; a rule follows the header.
// Either rows are collected and print() sizes the columns to fit them all, or
// stream() prints the header at once and each row as it is added (flushed, so
// a piped benchmark shows its rows as they are measured), columns sized to
// the header and at least kStreamColumnWidth.
class TextTable {
 public:
  static constexpr size_t kStreamColumnWidth = 9;

  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> cells);
  void print(std::ostream& os) const;
  void stream(std::ostream& os);

 private:
  void print_line(std::ostream& os, const std::vector<std::string>& cells) const;
  void print_rule(std::ostream& os) const;

  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> width_;
  std::ostream* stream_ = nullptr;
};

// "12.3 ms", "456 us", "1.23 s": three significant digits.
std::string format_seconds(double seconds);
// Milliseconds with three significant digits, no unit ("0.123", "45.6", "1230").
std::string format_ms(double seconds);
// "1,048,576".
std::string format_count(int64_t n);
// printf-style "%.<digits>g".
std::string format_general(double x, int digits = 3);
// "311 GFLOP/s", "296 TFLOP/s": flop per second with the unit that suits it.
std::string format_flops(double flop_per_s);
// "12.5x", "3090x".
std::string format_ratio(double x);

}  // namespace spattn::cli
