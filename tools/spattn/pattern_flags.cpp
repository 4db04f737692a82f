// tools/spattn/pattern_flags.cpp - pattern flags -> spattn::Pattern (see
// pattern_flags.hpp).
//
// A pattern spec is either --pattern "a+b+..." (union of the named patterns,
// all reading the same parameter flags) or --heads-pattern "x,y,..." (query
// head h gets spec list[h % n], each item itself a "+" union). --causal ANDs
// j <= p into every part. The `random` pattern keeps every block of the
// diagonal plus each other block (at or left of the diagonal when causal) with
// probability --density, drawn in row-major order from a splitmix64 stream
// seeded by --seed, and becomes a custom BSR pattern. Parameters left out take
// the defaults listed in pattern_flag_specs (kDefault* below).
#include "pattern_flags.hpp"

#include <fstream>
#include <sstream>

#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "spattn/splitmix64.hpp"

namespace spattn::cli {

namespace {

using pattern_math::ceil_div;


// Everything a single named pattern may read.
struct PartContext {
  const Args& args;
  int64_t q_len, k_len;
  int64_t block_q, block_k;
  bool causal;
};

// Defaults of the pattern parameters (the help text of pattern_flag_specs repeats them).
constexpr int64_t kDefaultWindow = 256;
constexpr int64_t kDefaultSink = 4;
constexpr int64_t kDefaultStride = 128;
constexpr int64_t kDefaultSummary = 8;
constexpr int64_t kDefaultSegment = 2048;
constexpr int64_t kDefaultRate = 4;
constexpr int64_t kDefaultWindowBlocks = 3;
constexpr int64_t kDefaultGlobalBlocks = 1;
constexpr int64_t kDefaultRandomBlocks = 3;
constexpr double kDefaultDensity = 0.1;

std::string format_double(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// The pattern names joined by ", ".
std::string joined_pattern_names() {
  std::string all;
  for (const std::string& n : pattern_names()) all += (all.empty() ? "" : ", ") + n;
  return all;
}

Pattern sliding_window_from_flags(const PartContext& c) {
  const Args& a = c.args;
  if (a.has("window-left") || a.has("window-right")) {
    require(!a.has("window"), "--pattern sliding-window takes either --window or ",
            "--window-left/--window-right, not both");
    return Pattern::sliding_window(a.get_int("window-left", 0, 0), a.get_int("window-right", 0, 0),
                                   c.causal);
  }
  const int64_t w = a.get_int("window", kDefaultWindow, 1);
  return c.causal ? Pattern::sliding_window(w - 1, 0, true) : Pattern::sliding_window(w);
}

Pattern dilated_from_flags(const PartContext& c) {
  const std::optional<std::vector<int64_t>> segments = c.args.find_int_list("segments", 1);
  const std::optional<std::vector<int64_t>> rates = c.args.find_int_list("rates", 1);
  if (!segments && !rates) return Pattern::dilated({kDefaultSegment}, {kDefaultRate}, c.causal);
  require(segments && rates, "--pattern dilated needs both --segments and --rates, or neither");
  require(segments->size() == rates->size(), "--segments and --rates must have the same length, got ",
          segments->size(), " and ", rates->size());
  return Pattern::dilated(*segments, *rates, c.causal);
}

// Random blocks plus the diagonal, as BSR (never a dense block matrix). One
// draw per block of the grid: grids of more than kRandomMaxBlocks blocks (a
// minute of drawing) are refused, and the indices are checked against the
// memory available before they are drawn.
constexpr int64_t kRandomMaxBlocks = int64_t{1} << 32;

Pattern random_from_flags(const PartContext& c) {
  const double density = c.args.get_double("density", kDefaultDensity, 0.0, 1.0);
  const uint64_t seed = static_cast<uint64_t>(c.args.get_int("seed", 0, 0));
  const int64_t rows = ceil_div(c.q_len, c.block_q), cols = ceil_div(c.k_len, c.block_k);
  require(cols == 0 || rows <= kRandomMaxBlocks / cols, "--pattern random draws every block of its ", rows, " x ", cols,
          " grid, more than ", kRandomMaxBlocks, " blocks; use larger --block-q/--block-k or shorter --seq");
  const double expected = density * static_cast<double>(rows) * static_cast<double>(cols) + 2.0 * static_cast<double>(rows);
  MemoryEstimate("--pattern random --density " + format_double(density) + " on " + std::to_string(rows) + " x " +
                 std::to_string(cols) + " blocks")
      .add("random blocks", add_bytes(bytes_for(static_cast<int64_t>(expected), sizeof(int32_t)),
                                      bytes_for(rows + 1, sizeof(int64_t))))
      .check();
  const int64_t offset = c.k_len - c.q_len;
  SplitMix64 rng(seed);
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t p_first = r * c.block_q + offset;
    const int64_t p_last = std::min(c.q_len, (r + 1) * c.block_q) - 1 + offset;
    // Key blocks holding this query block's diagonal positions (none before position 0).
    const int64_t diag_first = p_last < 0 ? cols : std::max<int64_t>(p_first, 0) / c.block_k;
    const int64_t diag_last = p_last < 0 ? -1 : p_last / c.block_k;
    const int64_t last_col = c.causal ? diag_last : cols - 1;
    for (int64_t col = 0; col <= last_col; ++col) {
      const bool diagonal = col >= diag_first && col <= diag_last;
      if (diagonal || rng.uniform() < density) indices.push_back(static_cast<int32_t>(col));
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  return Pattern::custom_bsr(std::move(offsets), std::move(indices), 1, rows, cols, c.block_q,
                             c.block_k, c.causal);
}

Pattern custom_from_flags(const PartContext& c) {
  const std::optional<std::string> path = c.args.find_string("mask-file");
  require(path.has_value(), "--pattern custom needs --mask-file FILE");
  const int64_t rows = ceil_div(c.q_len, c.block_q), cols = ceil_div(c.k_len, c.block_k);
  return Pattern::custom(read_block_matrix(*path, rows, cols), 1, rows, cols, c.block_q, c.block_k,
                         c.causal);
}

// One named pattern.
Pattern single_from_flags(const std::string& name, const PartContext& c) {
  const Args& a = c.args;
  if (name == "dense") return Pattern::dense(c.causal);
  if (name == "causal") return Pattern::causal();
  if (name == "block-diagonal")
    return Pattern::block_diagonal(a.get_int("diagonal-block", c.block_k, 1), c.causal);
  if (name == "sliding-window") return sliding_window_from_flags(c);
  if (name == "streaming")
    return Pattern::streaming(a.get_int("sink", kDefaultSink, 0), a.get_int("window", kDefaultWindow, 1));
  if (name == "strided") return Pattern::strided(a.get_int("stride", kDefaultStride, 1));
  if (name == "fixed")
    return Pattern::fixed(a.get_int("stride", kDefaultStride, 1), a.get_int("summary", kDefaultSummary, 0));
  if (name == "dilated") return dilated_from_flags(c);
  if (name == "bigbird")
    return Pattern::bigbird(c.k_len, c.block_k, a.get_int("window-blocks", kDefaultWindowBlocks, 1),
                            a.get_int("global-blocks", kDefaultGlobalBlocks, 0),
                            a.get_int("random-blocks", kDefaultRandomBlocks, 0),
                            static_cast<uint64_t>(a.get_int("seed", 0, 0)), c.causal);
  if (name == "longformer") {
    const std::vector<int64_t> globals = a.find_int_list("global-tokens", 0).value_or(std::vector<int64_t>{});
    return Pattern::longformer(a.get_int("window", kDefaultWindow, 0), globals, c.causal);
  }
  if (name == "custom") return custom_from_flags(c);
  if (name == "random") return random_from_flags(c);
  require(name != "topk", "--pattern topk chooses its blocks from the inputs and cannot be combined with ",
          "other patterns");
  fail("unknown pattern '", name, "' (known: ", joined_pattern_names(), "; join with + for a union)");
}

// "a+b+c": the union of the named patterns.
Pattern union_from_spec(const std::string& spec, const PartContext& c) {
  Pattern result;
  size_t start = 0;
  for (int part = 0;; ++part) {
    const size_t plus = spec.find('+', start);
    const std::string name = spec.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    require(!name.empty(), "pattern '", spec, "' has an empty part");
    const Pattern p = single_from_flags(name, c);
    result = part == 0 ? p : Pattern::unite(result, p);
    if (plus == std::string::npos) return result;
    start = plus + 1;
  }
}

}  // namespace

const std::vector<std::string>& pattern_names() {
  static const std::vector<std::string> names = {
      "dense",   "causal",  "block-diagonal", "sliding-window", "streaming", "strided",
      "fixed",   "dilated", "bigbird",        "longformer",     "custom",    "random"};
  return names;
}

std::string pattern_usage() {
  return "  patterns: " + joined_pattern_names() +
         "\n  A+B is the union of A and B; --heads-pattern A,B gives head h item h % n"
         "\n  topk: key blocks chosen at run time from q and k (--topk K or --tau T)";
}

std::vector<FlagSpec> pattern_flag_specs() {
  using K = FlagKind;
  return {
      {"pattern", K::Value, "NAME", "pattern name, or a union NAME+NAME (see above)"},
      {"heads-pattern", K::Value, "P1,P2,..", "per-head patterns: head h uses item h % n"},
      {"causal", K::Switch, "", "AND j <= p (bottom-right aligned) into every pattern"},
      {"block", K::Value, "B", "mask block size for queries and keys (default 128)"},
      {"block-q", K::Value, "B", "query block size (default --block)"},
      {"block-k", K::Value, "B", "key block size (default --block)"},
      {"diagonal-block", K::Value, "B", "block-diagonal: block size (default --block-k)"},
      {"window", K::Value, "W",
       "sliding-window: W keys incl. self; streaming: recent W; longformer: width (default 256)"},
      {"window-left", K::Value, "A", "sliding-window: keys p-A..p+B (with --window-right B)"},
      {"window-right", K::Value, "B", "sliding-window: see --window-left (default 0)"},
      {"sink", K::Value, "S", "streaming: the first S keys are always kept (default 4)"},
      {"stride", K::Value, "L", "strided, fixed: stride l (default 128); topk: antidiagonal stride (default 0)"},
      {"summary", K::Value, "C", "fixed: the last C keys of every l-segment (default 8)"},
      {"segments", K::Value, "W1,W2,..", "dilated: segment length per branch (default 2048)"},
      {"rates", K::Value, "R1,R2,..", "dilated: dilation rate per branch (default 4)"},
      {"window-blocks", K::Value, "W", "bigbird: window width in blocks (default 3)"},
      {"global-blocks", K::Value, "G", "bigbird: global blocks at each end (default 1)"},
      {"random-blocks", K::Value, "R", "bigbird: random blocks per row (default 3)"},
      {"global-tokens", K::Value, "I,J,..", "longformer: global token positions (default none)"},
      {"density", K::Value, "F", "random: share of the other blocks kept (default 0.1)"},
      {"seed", K::Value, "S", "seed of bigbird/random blocks and of the inputs (default 0)"},
      {"mask-file", K::Value, "FILE", "custom: block matrix, one line of 0/1 per query block"},
  };
}

PatternSetup pattern_from_flags(const Args& args, int64_t q_len, int64_t k_len, int64_t heads) {
  const int64_t block = args.get_int("block", 128, 1);
  const int64_t block_q = args.get_int("block-q", block, 1);
  const int64_t block_k = args.get_int("block-k", block, 1);
  const PartContext context{args, q_len, k_len, block_q, block_k, args.flag("causal")};

  const std::optional<std::string> spec = args.find_string("pattern");
  const std::optional<std::vector<std::string>> per_head = args.find_list("heads-pattern");
  require(spec.has_value() != per_head.has_value(),
          spec ? "give either --pattern or --heads-pattern, not both"
               : "--pattern NAME is required (or --heads-pattern P1,P2,...)");

  PatternSetup setup;
  setup.shape = MaskShape{q_len, k_len, block_q, block_k, heads};
  if (spec) {
    setup.pattern = union_from_spec(*spec, context);
    setup.label = *spec;
    return setup;
  }
  require(static_cast<int64_t>(per_head->size()) <= heads, "--heads-pattern lists ",
          per_head->size(), " patterns but there are only ", heads, " heads (--heads)");
  std::vector<Pattern> items;
  for (const std::string& item : *per_head) items.push_back(union_from_spec(item, context));
  std::vector<Pattern> by_head;
  for (int64_t h = 0; h < heads; ++h) by_head.push_back(items[h % items.size()]);
  setup.pattern = Pattern::per_head(by_head);
  setup.label = "heads:" + args.get_string("heads-pattern", "");
  return setup;
}

std::vector<uint8_t> read_block_matrix(const std::string& path, int64_t rows, int64_t cols) {
  std::ifstream in(path);
  require(in.good(), "--mask-file: cannot open '", path, "'");
  std::vector<uint8_t> blocks;
  std::string line;
  int64_t line_no = 0, row = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line[0] == '#') continue;
    require(row < rows, path, ":", line_no, ": too many rows: the sequence has ", rows,
            " query blocks");
    int64_t width = 0;
    for (size_t at = 0; at < line.size(); ++at) {
      const char ch = line[at];
      if (ch == ' ' || ch == '\t') continue;
      require(ch == '0' || ch == '1', path, ":", line_no, ": column ", at + 1,
              ": expected 0 or 1, got '", std::string(1, ch), "'");
      blocks.push_back(ch == '1' ? 1 : 0);
      ++width;
    }
    require(width == cols, path, ":", line_no, ": row has ", width, " blocks, expected ", cols,
            " (one per key block)");
    ++row;
  }
  require(!in.bad(), "--mask-file: error reading '", path, "'");
  require(row == rows, path, ":", line_no, ": the file has ", row, " rows, expected ", rows,
          " (one per query block)");
  return blocks;
}

}  // namespace spattn::cli
