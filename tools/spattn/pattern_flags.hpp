// tools/spattn/pattern_flags.hpp - the one place that turns command-line
// pattern flags into a spattn::Pattern and the block sizes of its mask.
//
// Names: dense, causal, block-diagonal, sliding-window, streaming, strided,
// fixed, dilated, bigbird, longformer, custom (--mask-file) and random (a
// seeded random fraction of blocks plus the diagonal). "a+b" is the union of
// patterns a and b; --heads-pattern a,b gives query head h the pattern
// list[h % n]. Every command that takes a pattern (run, mask, the bench
// catalogue) goes through pattern_from_flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/pattern.hpp"

namespace spattn::cli {

// The flags read by pattern_from_flags, for a command's flag table.
std::vector<FlagSpec> pattern_flag_specs();

struct PatternSetup {
  Pattern pattern;
  MaskShape shape;    // lengths, heads and block sizes for BlockMask::build
  std::string label;  // what was asked for, e.g. "dilated+sliding-window"
};

// Builds the pattern the flags describe for attention of q_len queries over
// k_len keys with `heads` query heads. Throws spattn::Error naming the flag.
PatternSetup pattern_from_flags(const Args& args, int64_t q_len, int64_t k_len, int64_t heads);

// The names accepted by --pattern (one term of a "+" union).
const std::vector<std::string>& pattern_names();
// Lines for a command's help: the pattern names and how to combine them.
std::string pattern_usage();

// Reads a custom block matrix: one text line per query block of '0'/'1'
// characters (spaces ignored), '#' starts a comment line. Checks that the
// matrix is rows x cols and rectangular; errors name the file and line.
// Returns the matrix row-major.
std::vector<uint8_t> read_block_matrix(const std::string& path, int64_t rows, int64_t cols);

}  // namespace spattn::cli
