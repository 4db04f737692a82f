// tools/spattn/bench_catalogue.hpp - the patterns and presets of `spattn bench`.
//
// A benchmark entry is a label plus the pattern flags that define it, exactly
// as a user would type them for `spattn run`, so the benchmark builds patterns
// through the same code (pattern_flags) and prints the flags it used. Two
// catalogues exist: one sized for attention timings at thousands of tokens,
// and one for timing BlockMask::build at a million tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pattern_flags.hpp"

namespace spattn::cli {

struct BenchEntry {
  std::string label;               // e.g. "streaming"
  std::vector<std::string> flags;  // e.g. {"--pattern", "streaming", "--sink", "16", ...}
};

// The flags joined by spaces, as they would be typed.
std::string flags_text(const BenchEntry& entry);

// The entry's pattern for attention of q_len x k_len with `heads` query heads;
// errors name the entry, its flags and the length.
PatternSetup entry_pattern(const BenchEntry& entry, int64_t q_len, int64_t k_len, int64_t heads);

// Every entry that attention sweeps may use, and the default preset's selection.
const std::vector<BenchEntry>& sweep_catalogue();
std::vector<std::string> default_sweep_labels();

// The seed programs' patterns: streaming (sink 16, window 64) and block-diagonal (block 16).
std::vector<BenchEntry> seed_entries();

// Static patterns with parameters that keep a mask sparse at about a million tokens.
const std::vector<BenchEntry>& mask_build_catalogue();

// The entries named in `labels` (each must exist in `catalogue`), in that order.
std::vector<BenchEntry> select_entries(const std::vector<BenchEntry>& catalogue,
                                       const std::vector<std::string>& labels);

}  // namespace spattn::cli
