// tools/spattn/png.cpp - RGB pictures and the PNG writer (see png.hpp).
//
// Uses libpng's simplified write API (png_image_write_to_stdio), which reports
// errors through png_image::message instead of longjmp, so no C++ object is
// skipped by a non-local jump. The file is written atomically (output_file.hpp).
#include "png.hpp"

#include <png.h>

#include <algorithm>
#include <cstring>

#include "output_file.hpp"

#include "spattn/error.hpp"

namespace spattn::cli {

RgbImage::RgbImage(int64_t width, int64_t height) : width_(width), height_(height) {
  require(width > 0 && height > 0 && width <= 1 << 16 && height <= 1 << 16,
          "picture size must be within 1..65536 pixels a side, got ", width, " x ", height);
  pixels_.assign(static_cast<size_t>(width * height * 3), 255);
}

Rgb RgbImage::at(int64_t x, int64_t y) const {
  const uint8_t* p = pixels_.data() + (y * width_ + x) * 3;
  return Rgb{p[0], p[1], p[2]};
}

void RgbImage::set(int64_t x, int64_t y, Rgb c) {
  uint8_t* p = pixels_.data() + (y * width_ + x) * 3;
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void RgbImage::fill(int64_t x0, int64_t y0, int64_t x1, int64_t y1, Rgb c) {
  x0 = std::max<int64_t>(x0, 0);
  y0 = std::max<int64_t>(y0, 0);
  x1 = std::min(x1, width_);
  y1 = std::min(y1, height_);
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x) set(x, y, c);
}

void write_png(const std::string& path, const RgbImage& image) {
  AtomicFile file(path);
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width());
  png.height = static_cast<png_uint_32>(image.height());
  png.format = PNG_FORMAT_RGB;
  const int ok = png_image_write_to_stdio(&png, file.stream(), 0, image.pixels().data(),
                                          static_cast<png_int_32>(image.width() * 3), nullptr);
  const std::string message = png.message;
  png_image_free(&png);
  require(ok, "cannot write PNG '", path, "': ", message);
  file.commit();
}

}  // namespace spattn::cli
