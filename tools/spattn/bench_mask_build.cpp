// tools/spattn/bench_mask_build.cpp - the `mask-build` preset of `spattn bench`
// (see bench_presets.hpp): how long BlockMask::build takes at long lengths.
//
// For every entry and length: the pattern is made once (its tables, e.g.
// random blocks, are not part of the timing), then BlockMask::build is timed
// (timing.hpp). The mask's size is checked against the memory available
// before its first build. Block density is blocks kept over all blocks.
#include <iostream>

#include "bench_presets.hpp"
#include "memory_checks.hpp"
#include "progress.hpp"
#include "text_table.hpp"

namespace spattn::cli {

void run_mask_build(const BenchConfig& config, JsonWriter& json) {
  const int64_t heads = config.shape.heads;
  json.key("results").begin_array();
  const int64_t cases = static_cast<int64_t>(config.entries.size() * config.seqs.size());
  int64_t done = 0;
  std::cout << "\n";
  TextTable table({"pattern", "L", "build ms", "min-max", "blocks kept", "full", "block density", "flags"});
  table.stream(std::cout);
  for (const BenchEntry& entry : config.entries) {
    for (const int64_t seq : config.seqs) {
      const PatternSetup setup = entry_pattern(entry, seq, seq, heads);
      progress_line("bench " + std::to_string(++done) + "/" + std::to_string(cases) + ": " + entry.label +
                    " L=" + std::to_string(seq), true);
      BlockMask mask = build_checked(setup, config.request);
      const Timing t = time_median([&] { mask = BlockMask::build(setup.pattern, setup.shape); },
                                   config.repeats, config.budget_s);
      const BlockMaskView v = mask.view();
      const double all_blocks = static_cast<double>(v.num_q_blocks) *
                                static_cast<double>(v.num_k_blocks) * static_cast<double>(v.num_heads);
      const double block_density = static_cast<double>(mask.num_blocks()) / all_blocks;
      table.add_row({entry.label, std::to_string(seq), format_ms(t.median_s), format_range_ms(t),
                     format_count(mask.num_blocks()),
                     format_count(mask.num_full_blocks()), format_general(block_density), flags_text(entry)});
      json.begin_object();
      json.field("pattern", entry.label).field("flags", flags_text(entry));
      json.field("describe", setup.pattern.describe()).field("seq", seq);
      json.field("block_q", mask.block_q()).field("block_k", mask.block_k());
      json.field("mask_heads", mask.num_heads());
      write_timing_json(json, "build", t);
      json.field("blocks_kept", mask.num_blocks()).field("full_blocks", mask.num_full_blocks());
      json.field("block_density", block_density);
      json.end_object();
    }
  }
  json.end_array();
}

}  // namespace spattn::cli
