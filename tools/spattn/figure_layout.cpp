// tools/spattn/figure_layout.cpp - titles, framed axes, legends and their
// placement (see figure_layout.hpp).
//
// frame_panel sizes its margins from what each side holds (tick marks, the
// widest number, the axis label), so numbers never overlap the panel; the
// callers choose tick spacings that keep numbers apart along an axis.
#include "figure_layout.hpp"

#include <algorithm>
#include <cmath>

#include "bitmap_font.hpp"

namespace spattn::cli {

namespace {

struct Spacing {
  int64_t mark, gap, label_gap, glyph;
  explicit Spacing(int64_t s) : mark(3 * s), gap(2 * s), label_gap(3 * s), glyph(text_height(s)) {}
};

int64_t widest_label(const Axis& axis, int64_t scale) {
  int64_t w = 0;
  for (const Tick& t : axis.ticks) w = std::max(w, text_width(t.label, scale));
  return w;
}

// Pixels a horizontal axis (top or bottom) takes above or below the frame.
int64_t across_horizontal(const Axis& axis, const Spacing& sp) {
  int64_t m = 0;
  if (!axis.ticks.empty()) m += sp.mark + sp.gap + sp.glyph;
  if (!axis.label.empty()) m += sp.label_gap + sp.glyph;
  return m;
}

// Pixels a vertical axis (left or right) takes beside the frame.
int64_t across_vertical(const Axis& axis, const Spacing& sp, int64_t scale) {
  int64_t m = 0;
  if (!axis.ticks.empty()) m += sp.mark + sp.gap + widest_label(axis, scale);
  if (!axis.label.empty()) m += sp.label_gap + sp.glyph;
  return m;
}

int64_t pixel(double at) { return static_cast<int64_t>(std::floor(at + 0.5)); }

}  // namespace

void draw_box(RgbImage& image, int64_t x0, int64_t y0, int64_t x1, int64_t y1, int64_t thickness, Rgb colour) {
  image.fill(x0, y0, x1, y0 + thickness, colour);
  image.fill(x0, y1 - thickness, x1, y1, colour);
  image.fill(x0, y0, x0 + thickness, y1, colour);
  image.fill(x1 - thickness, y0, x1, y1, colour);
}

void blit(RgbImage& dst, const RgbImage& src, int64_t x, int64_t y) {
  for (int64_t row = std::max<int64_t>(0, -y); row < src.height() && y + row < dst.height(); ++row)
    for (int64_t col = std::max<int64_t>(0, -x); col < src.width() && x + col < dst.width(); ++col)
      dst.set(x + col, y + row, src.at(col, row));
}

RgbImage frame_panel(const RgbImage& panel, const FrameAxes& axes, int64_t scale) {
  const Spacing sp(scale);
  const int64_t w = panel.width(), h = panel.height();
  // Numbers centred on a tick may reach half their width (or height) past the panel.
  const int64_t half_x = std::max(widest_label(axes.top, scale), widest_label(axes.bottom, scale)) / 2;
  const int64_t half_y = (axes.left.ticks.empty() && axes.right.ticks.empty()) ? 0 : sp.glyph / 2;
  const int64_t left = std::max(across_vertical(axes.left, sp, scale), half_x) + 1;
  const int64_t right = std::max(across_vertical(axes.right, sp, scale), half_x) + 1;
  const int64_t top = std::max(across_horizontal(axes.top, sp), half_y) + 1;
  const int64_t bottom = std::max(across_horizontal(axes.bottom, sp), half_y) + 1;
  RgbImage image(left + w + right, top + h + bottom);
  blit(image, panel, left, top);
  draw_box(image, left - 1, top - 1, left + w + 1, top + h + 1, 1, kInk);
  const int64_t line = scale >= 3 ? 2 : 1;

  for (const Tick& t : axes.top.ticks) {
    const int64_t x = left + pixel(t.at);
    image.fill(x, top - 1 - sp.mark, x + line, top - 1, kInk);
    draw_text(image, x - text_width(t.label, scale) / 2, top - 1 - sp.mark - sp.gap - sp.glyph, t.label, scale, kInk);
  }
  for (const Tick& t : axes.bottom.ticks) {
    const int64_t x = left + pixel(t.at), y = top + h + 1;
    image.fill(x, y, x + line, y + sp.mark, kInk);
    draw_text(image, x - text_width(t.label, scale) / 2, y + sp.mark + sp.gap, t.label, scale, kInk);
  }
  for (const Tick& t : axes.left.ticks) {
    const int64_t y = top + pixel(t.at), x = left - 1;
    image.fill(x - sp.mark, y, x, y + line, kInk);
    draw_text(image, x - sp.mark - sp.gap - text_width(t.label, scale), y - sp.glyph / 2, t.label, scale, kInk);
  }
  for (const Tick& t : axes.right.ticks) {
    const int64_t y = top + pixel(t.at), x = left + w + 1;
    image.fill(x, y, x + sp.mark, y + line, kInk);
    draw_text(image, x + sp.mark + sp.gap, y - sp.glyph / 2, t.label, scale, kInk);
  }
  // Axis labels, centred on the panel, outermost.
  const std::string& tl = axes.top.label;
  const std::string& bl = axes.bottom.label;
  if (!tl.empty()) draw_text(image, left + (w - text_width(tl, scale)) / 2, 0, tl, scale, kInk);
  if (!bl.empty()) draw_text(image, left + (w - text_width(bl, scale)) / 2, image.height() - sp.glyph, bl, scale, kInk);
  const std::string& ll = axes.left.label;
  const std::string& rl = axes.right.label;
  if (!ll.empty()) draw_text_up(image, 0, top + (h + text_width(ll, scale)) / 2, ll, scale, kInk);
  if (!rl.empty())
    draw_text_up(image, image.width() - sp.glyph, top + (h + text_width(rl, scale)) / 2, rl, scale, kInk);
  return image;
}

RgbImage draw_legend(const std::vector<std::vector<LegendEntry>>& groups, int64_t scale, int64_t max_width) {
  const Spacing sp(scale);
  const int64_t swatch = sp.glyph + 2 * scale, after_swatch = 2 * sp.gap, between = 4 * sp.glyph;
  const int64_t row_height = swatch + sp.gap;
  // Lay out first: where each item goes.
  std::vector<std::pair<const LegendEntry*, std::pair<int64_t, int64_t>>> at;
  int64_t y = -row_height, width = 1;
  for (const std::vector<LegendEntry>& group : groups) {
    int64_t x = 0;
    y += row_height;
    for (const LegendEntry& e : group) {
      const int64_t item = swatch + after_swatch + text_width(e.text, scale);
      if (x > 0 && x + item > max_width) {
        x = 0;
        y += row_height;
      }
      at.push_back({&e, {x, y}});
      width = std::max(width, x + item);
      x += item + between;
    }
  }
  RgbImage image(width, std::max<int64_t>(1, y + swatch));
  for (const auto& [e, xy] : at) {
    const auto [ex, ey] = xy;
    if (e->outline) {
      draw_box(image, ex, ey, ex + swatch, ey + swatch, std::max<int64_t>(2, scale), e->colour);
    } else {
      image.fill(ex, ey, ex + swatch, ey + swatch, e->colour);
      draw_box(image, ex, ey, ex + swatch, ey + swatch, 1, kInk);
    }
    draw_text(image, ex + swatch + after_swatch, ey + (swatch - sp.glyph) / 2, e->text, scale, kInk);
  }
  return image;
}

RgbImage draw_title(const std::vector<std::string>& lines, int64_t scale, int64_t width) {
  const int64_t chars = std::max<int64_t>(1, (width / scale + 1) / kGlyphAdvance);
  std::vector<std::string> wrapped;
  for (const std::string& line : lines) {
    std::string rest = line;
    while (static_cast<int64_t>(rest.size()) > chars) {
      size_t cut = rest.rfind(' ', static_cast<size_t>(chars));
      if (cut == std::string::npos || cut == 0) cut = static_cast<size_t>(chars);
      wrapped.push_back(rest.substr(0, cut));
      rest = rest.substr(rest[cut] == ' ' ? cut + 1 : cut);
    }
    wrapped.push_back(rest);
  }
  const int64_t line_height = kLineHeight * scale;
  RgbImage image(width, static_cast<int64_t>(wrapped.size()) * line_height - (kLineHeight - kGlyphHeight) * scale);
  for (size_t n = 0; n < wrapped.size(); ++n)
    draw_text(image, 0, static_cast<int64_t>(n) * line_height, wrapped[n], scale, kInk);
  return image;
}

RgbImage stack_down(const std::vector<const RgbImage*>& parts, int64_t gap, int64_t margin) {
  int64_t width = 1, height = 0;
  for (const RgbImage* p : parts) {
    width = std::max(width, p->width());
    height += p->height();
  }
  height += gap * (static_cast<int64_t>(parts.size()) - 1);
  RgbImage image(width + 2 * margin, std::max<int64_t>(height, 1) + 2 * margin);
  int64_t y = margin;
  for (const RgbImage* p : parts) {
    blit(image, *p, margin, y);
    y += p->height() + gap;
  }
  return image;
}

RgbImage stack_right(const std::vector<const RgbImage*>& parts, int64_t gap, int64_t margin) {
  int64_t width = 0, height = 1;
  for (const RgbImage* p : parts) {
    width += p->width();
    height = std::max(height, p->height());
  }
  width += gap * (static_cast<int64_t>(parts.size()) - 1);
  RgbImage image(std::max<int64_t>(width, 1) + 2 * margin, height + 2 * margin);
  int64_t x = margin;
  for (const RgbImage* p : parts) {
    blit(image, *p, x, margin);
    x += p->width() + gap;
  }
  return image;
}

}  // namespace spattn::cli
