// tools/spattn/bench_catalogue.cpp - the patterns and presets of `spattn bench`
// (see bench_catalogue.hpp).
#include "bench_catalogue.hpp"

#include "spattn/error.hpp"

namespace spattn::cli {

std::string flags_text(const BenchEntry& entry) {
  std::string text;
  for (const std::string& f : entry.flags) text += (text.empty() ? "" : " ") + f;
  return text;
}

PatternSetup entry_pattern(const BenchEntry& entry, int64_t q_len, int64_t k_len, int64_t heads) {
  try {
    const Args args(entry.flags, pattern_flag_specs(), "bench entry '" + entry.label + "'");
    PatternSetup setup = pattern_from_flags(args, q_len, k_len, heads);
    args.require_all_used("to bench entry '" + entry.label + "'");
    setup.label = entry.label;
    return setup;
  } catch (const Error& e) {
    fail("bench entry '", entry.label, "' (", flags_text(entry), ") at L=", q_len, ": ", e.what());
  }
}

const std::vector<BenchEntry>& sweep_catalogue() {
  // Windows of 256 keys, 64- or 128-token blocks: sparse at 4K, not trivially so at 1K.
  static const std::vector<BenchEntry> entries = {
      {"dense", {"--pattern", "dense"}},
      {"causal", {"--pattern", "causal"}},
      {"sliding-window", {"--pattern", "sliding-window", "--window", "256"}},
      {"streaming", {"--pattern", "streaming", "--sink", "16", "--window", "256"}},
      {"block-diagonal", {"--pattern", "block-diagonal", "--block", "64"}},
      {"strided", {"--pattern", "strided", "--stride", "256"}},
      {"fixed", {"--pattern", "fixed", "--stride", "256", "--summary", "32"}},
      {"dilated", {"--pattern", "dilated", "--segments", "512,2048", "--rates", "2,8"}},
      {"bigbird", {"--pattern", "bigbird", "--block", "64"}},
      {"longformer", {"--pattern", "longformer", "--window", "256", "--global-tokens", "0,1,2,3"}},
      {"dilated+window",
       {"--pattern", "dilated+sliding-window", "--segments", "1024", "--rates", "4", "--window", "256",
        "--causal"}},
      {"random", {"--pattern", "random", "--density", "0.1", "--seed", "0"}},
  };
  return entries;
}

std::vector<std::string> default_sweep_labels() {
  return {"dense",   "causal",  "sliding-window", "streaming",      "block-diagonal",
          "strided", "bigbird", "dilated+window", "random"};
}

std::vector<BenchEntry> seed_entries() {
  return {
      {"streaming", {"--pattern", "streaming", "--sink", "16", "--window", "64"}},
      {"block-diagonal", {"--pattern", "block-diagonal", "--block", "16"}},
  };
}

const std::vector<BenchEntry>& mask_build_catalogue() {
  // Dense and causal keep 67M / 34M blocks at 1M tokens: their time is that of
  // writing the explicit plan.
  static const std::vector<BenchEntry> entries = {
      {"dense", {"--pattern", "dense"}},
      {"causal", {"--pattern", "causal"}},
      {"sliding-window", {"--pattern", "sliding-window", "--window", "4096"}},
      {"streaming", {"--pattern", "streaming", "--sink", "128", "--window", "4096"}},
      {"block-diagonal", {"--pattern", "block-diagonal", "--diagonal-block", "4096"}},
      {"strided", {"--pattern", "strided", "--stride", "4096"}},
      {"fixed", {"--pattern", "fixed", "--stride", "4096", "--summary", "128"}},
      {"dilated", {"--pattern", "dilated", "--segments", "2048,8192", "--rates", "4,16"}},
      {"bigbird", {"--pattern", "bigbird"}},
      {"longformer",
       {"--pattern", "longformer", "--window", "4096", "--global-tokens", "0,1,2,3,4,5,6,7"}},
      {"dilated+window",
       {"--pattern", "dilated+sliding-window", "--segments", "2048", "--rates", "4", "--window", "512",
        "--causal"}},
      {"random", {"--pattern", "random", "--density", "0.01", "--seed", "0"}},
  };
  return entries;
}

std::vector<BenchEntry> select_entries(const std::vector<BenchEntry>& catalogue,
                                       const std::vector<std::string>& labels) {
  std::vector<BenchEntry> out;
  for (const std::string& label : labels) {
    const BenchEntry* found = nullptr;
    for (const BenchEntry& e : catalogue)
      if (e.label == label) found = &e;
    if (!found) {
      std::string known;
      for (const BenchEntry& e : catalogue) known += (known.empty() ? "" : ", ") + e.label;
      fail("--patterns: no benchmark entry '", label, "' in this preset (known: ", known, ")");
    }
    out.push_back(*found);
  }
  return out;
}

}  // namespace spattn::cli
