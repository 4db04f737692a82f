// tools/spattn/mask_figure.cpp - the block and token pictures of `spattn
// mask`, composed from panels, axes, inset, title and legend (see
// mask_figure.hpp).
//
// Layout, top to bottom: the title; the framed block panel (axes on four
// sides) with, to its right, the inset's caption over the framed inset; the
// legend. Tick spacings are powers of two, wide enough apart that the numbers
// never touch; lengths from 10,000 on that are multiples of 1024 are written
// with K or M (1024 and 1024^2).
#include "mask_figure.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "bitmap_font.hpp"
#include "figure_layout.hpp"
#include "mask_image.hpp"
#include "mask_inset.hpp"
#include "spattn/memory.hpp"
#include "text_table.hpp"

namespace spattn::cli {

namespace {

// Text scale of a picture whose panel is about `max_side` pixels.
int64_t text_scale(int64_t max_side) { return max_side < 384 ? 1 : max_side < 1536 ? 2 : 3; }

std::string tick_number(int64_t v) {
  if (v >= 10000 && v % (int64_t{1} << 20) == 0) return std::to_string(v >> 20) + "M";
  if (v >= 10000 && v % 1024 == 0) return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

// Ticks at first, first + step, ... (multiples of step) up to first + count
// units, `pixels_per_unit` apart per unit, measured from `first`; step is the
// smallest power of two that leaves `room` pixels between ticks.
std::vector<Tick> ticks(int64_t first, int64_t count, double pixels_per_unit, double room) {
  int64_t step = 1;
  while (static_cast<double>(step) * pixels_per_unit < room && step < count) step *= 2;
  std::vector<Tick> out;
  for (int64_t v = (first + step - 1) / step * step; v <= first + count; v += step)
    out.push_back(Tick{static_cast<double>(v - first) * pixels_per_unit, tick_number(v)});
  return out;
}

// Room between ticks along a horizontal axis: the widest number plus a few
// characters; along a vertical one: three lines of text.
double room_across(int64_t largest, int64_t scale) {
  return static_cast<double>(text_width(tick_number(largest), scale) + 6 * kGlyphAdvance * scale);
}
double room_down(int64_t scale) { return static_cast<double>(3 * kLineHeight * scale); }

// Axes of a panel whose cells span `ppc` pixels and `tokens_per_cell` tokens
// (1 for a token panel, the block size for a block panel): tokens bottom and
// left, blocks top and right.
FrameAxes mask_axes(const BlockMaskView& v, double ppc, int64_t q_tokens_per_cell, int64_t k_tokens_per_cell,
                    int64_t scale) {
  const double px_per_key = ppc / static_cast<double>(k_tokens_per_cell);
  const double px_per_query = ppc / static_cast<double>(q_tokens_per_cell);
  const double across = room_across(v.k_len, scale), down = room_down(scale);
  FrameAxes a;
  a.bottom = Axis{"key (token)", ticks(0, v.k_len, px_per_key, across)};
  a.left = Axis{"query (token)", ticks(0, v.q_len, px_per_query, down)};
  a.top = Axis{"key block", ticks(0, v.num_k_blocks, px_per_key * static_cast<double>(v.block_k), across)};
  a.right = Axis{"query block", ticks(0, v.num_q_blocks, px_per_query * static_cast<double>(v.block_q), down)};
  return a;
}

std::string shape_line(const BlockMask& mask, int64_t head, int64_t query_heads) {
  return "Lq " + std::to_string(mask.q_len()) + ", Lk " + std::to_string(mask.k_len()) + ", blocks " +
         std::to_string(mask.block_q()) + " x " + std::to_string(mask.block_k()) + " (" +
         std::to_string(mask.num_q_blocks()) + " x " + std::to_string(mask.num_k_blocks()) + " grid), head " +
         std::to_string(head) + " of " + std::to_string(query_heads);
}

// The title, `body` and the legend under one another, with a margin. The
// title may be wider than the body, up to kTitleChars characters.
constexpr int64_t kTitleChars = 72;
RgbImage compose(const std::vector<std::string>& title, const RgbImage& body,
                 const std::vector<std::vector<LegendEntry>>& legend, int64_t scale) {
  const int64_t gap = 2 * kLineHeight * scale;
  int64_t title_width = body.width();
  for (const std::string& line : title)
    title_width = std::max(title_width, text_width(line.substr(0, kTitleChars), scale));
  const RgbImage title_image = draw_title(title, scale, title_width);
  const RgbImage legend_image = draw_legend(legend, scale, body.width());
  return stack_down({&title_image, &body, &legend_image}, gap, 3 * kGlyphAdvance * scale);
}

// The inset next to the block panel: its caption over the framed pairs.
RgbImage inset_column(const BlockMask& mask, int64_t head, int64_t query_heads, const PairRegion& r,
                      int64_t max_side, int64_t scale) {
  const int64_t ppp = std::max<int64_t>(2, max_side * 3 / 8 / std::max(r.rows, r.cols));
  const RgbImage pairs = render_pair_region(mask, head, query_heads, r, ppp);
  FrameAxes a;
  a.top = Axis{"key (token)", ticks(r.k0, r.cols, static_cast<double>(ppp), room_across(r.k0 + r.cols, scale))};
  a.left = Axis{"query (token)", ticks(r.q0, r.rows, static_cast<double>(ppp), room_down(scale))};
  const RgbImage framed = frame_panel(pairs, a, scale);
  const std::vector<std::string> lines = {
      "inset, pair by pair:", "queries " + std::to_string(r.q0) + "-" + std::to_string(r.q0 + r.rows - 1) +
                                  ", keys " + std::to_string(r.k0) + "-" + std::to_string(r.k0 + r.cols - 1)};
  int64_t width = framed.width();
  for (const std::string& line : lines) width = std::max(width, text_width(line, scale));
  const RgbImage caption = draw_title(lines, scale, width);
  return stack_down({&caption, &framed}, kLineHeight * scale);
}

// Outlines the inset's region on the block panel (at least 3 pixels a side).
void mark_region(RgbImage& panel, const BlockMaskView& v, double ppc, const PairRegion& r, int64_t scale) {
  const double px_per_key = ppc / static_cast<double>(v.block_k), px_per_query = ppc / static_cast<double>(v.block_q);
  int64_t x0 = static_cast<int64_t>(std::floor(static_cast<double>(r.k0) * px_per_key));
  int64_t x1 = static_cast<int64_t>(std::ceil(static_cast<double>(r.k0 + r.cols) * px_per_key));
  int64_t y0 = static_cast<int64_t>(std::floor(static_cast<double>(r.q0) * px_per_query));
  int64_t y1 = static_cast<int64_t>(std::ceil(static_cast<double>(r.q0 + r.rows) * px_per_query));
  const int64_t thickness = scale + 1, least = 2 * thickness + 1;
  // Grown to the least size, then moved back inside the panel.
  x1 = std::max(x1, x0 + least);
  y1 = std::max(y1, y0 + least);
  const int64_t dx = std::max<int64_t>(0, x1 - panel.width()), dy = std::max<int64_t>(0, y1 - panel.height());
  draw_box(panel, std::max<int64_t>(0, x0 - dx), std::max<int64_t>(0, y0 - dy), x1 - dx, y1 - dy, thickness,
           kInsetMark);
}

RgbImage block_picture(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side,
                       const std::string& pattern) {
  const int64_t scale = text_scale(max_side);
  const BlockMaskView v = mask.view();
  const std::optional<PairRegion> region = inset_region(mask, head, query_heads);
  // The panel lives only until it is framed: at most three figure-sized
  // images at once (mask_pictures_bytes counts on it).
  const RgbImage framed = [&] {
    MaskPanel panel = render_block_mask(mask, head, query_heads, max_side);
    if (region) mark_region(panel.image, v, panel.pixels_per_cell, *region, scale);
    return frame_panel(panel.image, mask_axes(v, panel.pixels_per_cell, v.block_q, v.block_k, scale), scale);
  }();
  std::vector<std::vector<LegendEntry>> legend = {{{kMaskFull, "full block: every pair"},
                                                  {kMaskPartial, "partial block: pairs tested one by one"},
                                                  {kMaskEmpty, "empty block: skipped"}}};
  std::optional<RgbImage> with_inset;
  if (region) {
    const RgbImage inset = inset_column(mask, head, query_heads, *region, max_side, scale);
    with_inset = stack_right({&framed, &inset}, 4 * kLineHeight * scale);
    legend.push_back({{kInsetMark, "inset's region", true},
                      {kMaskFull, "allowed pair"},
                      {kMaskWasted, "masked pair in a visited block"}});
  }
  const RgbImage& body = with_inset ? *with_inset : framed;
  const HeadBlocks counts = count_head_blocks(mask, head, query_heads);
  const std::vector<std::string> title = {
      pattern, shape_line(mask, head, query_heads),
      "blocks kept: " + format_count(counts.kept) + " of " + format_count(v.num_q_blocks * v.num_k_blocks) + " (" +
          format_count(counts.full) + " full, " + format_count(counts.kept - counts.full) + " partial)"};
  return compose(title, body, legend, scale);
}

RgbImage token_picture(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side,
                       const std::string& pattern) {
  const int64_t scale = text_scale(max_side);
  const BlockMaskView v = mask.view();
  int64_t allowed = 0;
  const RgbImage framed = [&] {
    const MaskPanel panel = render_token_mask(mask, head, query_heads, max_side, &allowed);
    return frame_panel(panel.image, mask_axes(v, panel.pixels_per_cell, 1, 1, scale), scale);
  }();
  const int64_t pairs = v.q_len * v.k_len;
  const std::vector<std::string> title = {
      pattern, shape_line(mask, head, query_heads),
      "pairs allowed: " + format_count(allowed) + " of " + format_count(pairs) + " (density " +
          format_general(static_cast<double>(allowed) / static_cast<double>(pairs), 4) + ")"};
  const std::vector<std::vector<LegendEntry>> legend = {{{kMaskFull, "allowed pair"},
                                                         {kMaskWasted, "masked pair in a visited block"},
                                                         {kMaskEmpty, "pair in a skipped block"}}};
  return compose(title, framed, legend, scale);
}

}  // namespace

std::string token_picture_path(const std::string& out) {
  const std::string ext = ".png";
  const bool has_ext = out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? out.substr(0, out.size() - ext.size()) : out) + "_tokens.png";
}

int64_t mask_pictures_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side) {
  // A figure (panel, inset, axes, title, legend, margins) fits 2 max_side +
  // 1024 pixels across and max_side + 1024 down, and at most three such
  // images are alive at once while one is composed (block_picture).
  const int64_t figure = bytes_for(bytes_for(2 * max_side + 1024, max_side + 1024), 3);
  return add_bytes(mask_panels_bytes(q_len, k_len, block_q, block_k, max_side), bytes_for(figure, 3));
}

void write_mask_pictures(std::ostream& os, const BlockMask& mask, int64_t head, int64_t query_heads,
                         int64_t max_side, const std::string& out, const std::string& pattern) {
  const RgbImage blocks = block_picture(mask, head, query_heads, max_side, pattern);
  write_png(out, blocks);
  os << "wrote       " << out << " (" << blocks.width() << " x " << blocks.height() << ")\n";
  if (mask.q_len() <= kTokenPictureMaxPairs / mask.k_len()) {
    const std::string path = token_picture_path(out);
    const RgbImage tokens = token_picture(mask, head, query_heads, max_side, pattern);
    write_png(path, tokens);
    os << "wrote       " << path << " (" << tokens.width() << " x " << tokens.height() << ")\n";
  }
}

}  // namespace spattn::cli
