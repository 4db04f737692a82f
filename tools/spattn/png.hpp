// tools/spattn/png.hpp - an RGB picture in memory and its PNG writer (libpng).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spattn::cli {

struct Rgb {
  uint8_t r = 255, g = 255, b = 255;
};

// `a` moved a share `weight_b` (0..1) of the way to `b`, per channel.
inline Rgb blend(Rgb a, Rgb b, double weight_b) {
  const auto one = [weight_b](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(x + (static_cast<double>(y) - x) * weight_b + 0.5);
  };
  return Rgb{one(a.r, b.r), one(a.g, b.g), one(a.b, b.b)};
}

// 8-bit RGB pixels, row-major, starting white.
class RgbImage {
 public:
  RgbImage(int64_t width, int64_t height);
  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  Rgb at(int64_t x, int64_t y) const;
  void set(int64_t x, int64_t y, Rgb c);
  // Fills [x0, x1) x [y0, y1), clipped to the picture.
  void fill(int64_t x0, int64_t y0, int64_t x1, int64_t y1, Rgb c);
  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  int64_t width_, height_;
  std::vector<uint8_t> pixels_;
};

// Writes `image` as an 8-bit RGB PNG; throws spattn::Error naming `path` on failure.
void write_png(const std::string& path, const RgbImage& image);

}  // namespace spattn::cli
