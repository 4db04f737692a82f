// tools/spattn/bitmap_font.hpp - text on an RgbImage with a built-in 5x7 font.
//
// The mask pictures need a title, tick numbers and a legend, and the tool has
// no font library: printable ASCII (32..126) is drawn from a table of 5x7
// glyphs with a descender row, 5x8 in all (bitmap_font.cpp), each font pixel
// a `scale` x `scale` square. A character takes kGlyphAdvance x kLineHeight
// font pixels (one column and two rows of space around the glyph); other
// bytes are drawn as '?'.
#pragma once

#include <cstdint>
#include <string>

#include "png.hpp"

namespace spattn::cli {

constexpr int64_t kGlyphWidth = 5, kGlyphHeight = 8;
constexpr int64_t kGlyphAdvance = kGlyphWidth + 1;  // font pixels from one character to the next
constexpr int64_t kLineHeight = kGlyphHeight + 2;   // font pixels from one line to the next

// Width and height in pixels of one line of `text` at `scale` (descenders included).
int64_t text_width(const std::string& text, int64_t scale);
inline int64_t text_height(int64_t scale) { return kGlyphHeight * scale; }

// Draws `text` with its top-left corner at (x, y), left to right; pixels
// outside the picture are clipped.
void draw_text(RgbImage& image, int64_t x, int64_t y, const std::string& text, int64_t scale, Rgb colour);

// Draws `text` turned a quarter to the left (read bottom to top), its
// bottom-left corner at (x, y): the line runs up from y, glyphs kGlyphHeight
// * scale pixels wide to the right of x.
void draw_text_up(RgbImage& image, int64_t x, int64_t y, const std::string& text, int64_t scale, Rgb colour);

}  // namespace spattn::cli
