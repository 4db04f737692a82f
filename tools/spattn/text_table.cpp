// tools/spattn/text_table.cpp - aligned text tables and number formatting
// (see text_table.hpp).
#include "text_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "spattn/error.hpp"

namespace spattn::cli {

void TextTable::add_row(std::vector<std::string> cells) {
  require(cells.size() == header_.size(), "TextTable: row has ", cells.size(), " cells, header has ",
          header_.size());
  if (stream_) {
    print_line(*stream_, cells);
    stream_->flush();
    return;
  }
  rows_.push_back(std::move(cells));
}

void TextTable::print_line(std::ostream& os, const std::vector<std::string>& cells) const {
  for (size_t c = 0; c < cells.size(); ++c) {
    const std::string pad(width_[c] - std::min(width_[c], cells[c].size()), ' ');
    os << (c ? "  " : "") << (c ? pad + cells[c] : cells[c] + pad);
  }
  os << '\n';
}

void TextTable::print_rule(std::ostream& os) const {
  size_t total = 0;
  for (size_t w : width_) total += w;
  os << std::string(total + 2 * (width_.size() - 1), '-') << '\n';
}

void TextTable::print(std::ostream& os) const {
  TextTable sized = *this;
  for (size_t c = 0; c < header_.size(); ++c) {
    sized.width_.push_back(header_[c].size());
    for (const auto& row : rows_) sized.width_[c] = std::max(sized.width_[c], row[c].size());
  }
  sized.print_line(os, header_);
  sized.print_rule(os);
  for (const auto& row : rows_) sized.print_line(os, row);
}

void TextTable::stream(std::ostream& os) {
  require(rows_.empty(), "TextTable: stream() must come before the rows");
  width_.clear();
  for (const std::string& h : header_) width_.push_back(std::max(h.size(), kStreamColumnWidth));
  stream_ = &os;
  print_line(os, header_);
  print_rule(os);
  os.flush();
}

std::string format_general(double x, int digits) {
  if (!std::isfinite(x)) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return buf;
}

std::string format_ms(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  const double ms = seconds * 1e3;
  char buf[48];
  if (ms >= 100.0) {
    std::snprintf(buf, sizeof buf, "%.0f", ms);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", ms);
  }
  return buf;
}

std::string format_seconds(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  if (seconds >= 1.0) return format_general(seconds) + " s";
  if (seconds >= 1e-3) return format_general(seconds * 1e3) + " ms";
  return format_general(seconds * 1e6) + " us";
}

std::string format_count(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t at = 0; at < digits.size(); ++at) {
    if (at && (digits.size() - at) % 3 == 0) out += ',';
    out += digits[at];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_flops(double flop_per_s) {
  if (flop_per_s >= 1e12) return format_general(flop_per_s / 1e12) + " TFLOP/s";
  return format_general(flop_per_s / 1e9) + " GFLOP/s";
}

std::string format_ratio(double x) {
  if (!std::isfinite(x)) return "-";
  if (x < 1000.0) return format_general(x) + "x";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.0fx", x);
  return buf;
}

}  // namespace spattn::cli
