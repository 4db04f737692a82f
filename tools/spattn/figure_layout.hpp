// tools/spattn/figure_layout.hpp - the parts of a figure around a picture:
// a title, axes with tick marks and numbers, a legend, and the placement of
// these parts on one canvas.
//
// Each part is drawn into an RgbImage of its own size (white background,
// text in the bitmap font at `scale`), and stack_down / stack_right place
// parts next to each other. mask_figure.cpp builds the mask pictures from
// them; nothing here knows about masks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "png.hpp"

namespace spattn::cli {

constexpr Rgb kInk{40, 40, 40};  // text, frames and tick marks

// A tick at `at` pixels from the panel's left (top, bottom) or top (left,
// right) edge, with its number.
struct Tick {
  double at = 0.0;
  std::string label;
};
struct Axis {
  std::string label;  // drawn outside the numbers; empty for none
  std::vector<Tick> ticks;
};
struct FrameAxes {
  Axis top, bottom, left, right;
};

// `panel` inside a one-pixel frame, with each axis's tick marks, numbers and
// label outside it (left and right labels read bottom to top).
RgbImage frame_panel(const RgbImage& panel, const FrameAxes& axes, int64_t scale);

// One legend item: a swatch filled with `colour` (or only its outline drawn
// in `colour`, for a marker drawn over the picture) and its text.
struct LegendEntry {
  Rgb colour;
  std::string text;
  bool outline = false;
};
// Each group of items on rows of its own, no wider than `max_width` (at least
// one item a row).
RgbImage draw_legend(const std::vector<std::vector<LegendEntry>>& groups, int64_t scale, int64_t max_width);

// `lines` wrapped at spaces to `width` pixels (a word wider than that is cut).
RgbImage draw_title(const std::vector<std::string>& lines, int64_t scale, int64_t width);

// Copies `src` into `dst` with its top-left corner at (x, y), clipped.
void blit(RgbImage& dst, const RgbImage& src, int64_t x, int64_t y);
// The parts one under the other (left-aligned) or side by side (top-aligned),
// `gap` pixels apart, with `margin` white pixels around them all.
RgbImage stack_down(const std::vector<const RgbImage*>& parts, int64_t gap, int64_t margin = 0);
RgbImage stack_right(const std::vector<const RgbImage*>& parts, int64_t gap, int64_t margin = 0);

// Outline of [x0, x1) x [y0, y1), `thickness` pixels inside that box, clipped.
void draw_box(RgbImage& image, int64_t x0, int64_t y0, int64_t x1, int64_t y1, int64_t thickness, Rgb colour);

}  // namespace spattn::cli
