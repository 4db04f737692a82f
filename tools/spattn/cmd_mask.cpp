// tools/spattn/cmd_mask.cpp - `spattn mask`: build a BlockMask, report it and
// draw it.
//
// Prints the blocks kept (full and partial), the density and the build time,
// writes the block picture to --out and, when Lq * Lk <= 2048 * 2048, the
// token picture next to it (FILE stem + "_tokens.png"). See mask_figure.hpp
// for what the pictures show.
#include <chrono>
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "dynamic_pattern.hpp"
#include "mask_figure.hpp"
#include "mask_image.hpp"
#include "memory_checks.hpp"
#include "output_file.hpp"
#include "pattern_flags.hpp"
#include "spattn/error.hpp"
#include "text_table.hpp"

namespace spattn::cli {

namespace {

int mask_main(const Args& args) {
  // The library takes zero lengths; a mask of them has no picture to draw.
  const std::optional<int64_t> seq = args.find_int("seq", 0);
  require(seq.has_value(), "spattn mask needs --seq L");
  const int64_t q_len = *seq;
  const int64_t k_len = args.get_int("seq-k", q_len, 0);
  require(q_len > 0 && k_len > 0, "spattn mask draws pictures and needs --seq and --seq-k >= 1, got --seq ", q_len,
          " --seq-k ", k_len, " (the mask of a zero length is empty)");
  const int64_t heads = args.get_int("heads", 1, 1);
  const int64_t head = args.get_int("head", 0, 0);
  require(head < heads, "--head must be < --heads (", heads, "), got ", head);
  const int64_t max_side = args.get_int("size", 1024, 16, 8192);
  const std::optional<std::string> out = args.find_string("out");
  require(out.has_value(), "spattn mask needs --out FILE.png");
  check_output("--out", *out);
  check_output("--out", token_picture_path(*out));
  if (is_dynamic_pattern(args)) return mask_dynamic(args, q_len, k_len, heads, head, max_side, *out);
  const PatternSetup setup = pattern_from_flags(args, q_len, k_len, heads);
  args.require_all_used("to --pattern " + setup.label);

  MemoryEstimate need(size_request(args));
  need.add("block mask", BlockMask::build_bytes(setup.pattern, setup.shape));
  need.add("pictures", mask_pictures_bytes(q_len, k_len, setup.shape.block_q, setup.shape.block_k, max_side));
  need.check();

  const auto start = std::chrono::steady_clock::now();
  const BlockMask mask = BlockMask::build(setup.pattern, setup.shape);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const HeadBlocks counts = count_head_blocks(mask, head, heads);

  std::ostream& os = std::cout;
  os << "pattern     " << setup.label << ": " << setup.pattern.describe() << "\n";
  os << "shape       Lq=" << q_len << " Lk=" << k_len << " heads=" << heads << ", blocks "
     << mask.block_q() << "x" << mask.block_k() << " (" << mask.num_q_blocks() << " x " << mask.num_k_blocks()
     << " grid, " << mask.num_heads() << " mask head" << (mask.num_heads() > 1 ? "s" : "") << ")\n";
  os << "blocks      head " << head << ": " << format_count(counts.kept) << " kept of "
     << format_count(mask.num_q_blocks() * mask.num_k_blocks()) << " (" << format_count(counts.full)
     << " full, " << format_count(counts.kept - counts.full) << " partial)";
  if (mask.num_heads() > 1) os << "; all heads: " << format_count(mask.num_blocks());
  os << "\n";
  os << "density     " << format_general(mask.density(heads), 4) << " ("
     << format_count(mask.kept_pairs(heads)) << " pairs kept over " << heads << " head"
     << (heads > 1 ? "s" : "") << ")\n";
  os << "build time  " << format_seconds(build_s) << "\n";

  const std::string described = setup.pattern.describe();
  write_mask_pictures(os, mask, head, heads, max_side, *out,
                      described == setup.label ? described : setup.label + ": " + described);
  return 0;
}

}  // namespace

Command mask_command() {
  using K = FlagKind;
  std::vector<FlagSpec> flags = {
      {"seq", K::Value, "L", "query length (required)"},
      {"seq-k", K::Value, "L", "key length (default --seq)"},
      {"heads", K::Value, "H", "query heads (default 1)"},
      {"head", K::Value, "h", "the head to draw (default 0)"},
      {"out", K::Value, "FILE.png", "block picture; the token picture goes to FILE_tokens.png"},
      {"size", K::Value, "PX", "longer side of the pictures' panels, about (default 1024)"},
  };
  for (FlagSpec& f : pattern_flag_specs()) flags.push_back(std::move(f));
  for (FlagSpec& f : dynamic_flag_specs(false)) flags.push_back(std::move(f));
  return Command{"mask", "build a block mask, print its statistics and draw it as PNG",
                 "usage: spattn mask --pattern NAME [pattern flags] --seq L --out FILE.png\n"
                 "  block picture: full blocks dark blue, partial orange, skipped white, and\n"
                 "  where a partial block hides finer structure an inset of pairs one by one;\n"
                 "  token picture (Lq*Lk <= 2048^2): allowed pairs dark blue, masked pairs\n"
                 "  inside visited blocks light blue; each with a title, axes and a legend\n" +
                     pattern_usage(),
                 std::move(flags), mask_main};
}

}  // namespace spattn::cli
