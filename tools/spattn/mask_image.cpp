// tools/spattn/mask_image.cpp - pictures of a BlockMask (see mask_image.hpp).
//
// Both pictures first classify cells (per block or per pair), accumulate the
// classes per pixel, then colour each pixel and overlay the block grid.
#include "mask_image.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/memory.hpp"

namespace spattn::cli {

namespace {

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kFull{33, 82, 150};        // full block / allowed pair
constexpr Rgb kPartial{240, 150, 40};    // partial block
constexpr Rgb kWasted{190, 214, 238};    // masked-out pair inside a visited block
constexpr Rgb kGridLine{120, 120, 120};  // blended in, so lines show on any colour
constexpr double kGridWeight = 0.3;
// The token picture is drawn only up to this many (query, key) pairs.
constexpr int64_t kTokenPictureMaxPairs = int64_t{2048} * 2048;

// How cells map to pixels: each cell is `scale` pixels wide, or each pixel
// covers `shrink` cells along each axis.
struct Raster {
  int64_t rows, cols;
  int64_t scale = 1, shrink = 1;
  int64_t width() const { return (cols + shrink - 1) / shrink * scale; }
  int64_t height() const { return (rows + shrink - 1) / shrink * scale; }
};

Raster make_raster(int64_t rows, int64_t cols, int64_t max_side) {
  require(max_side > 0, "max_side must be > 0, got ", max_side);
  Raster r{rows, cols};
  const int64_t longer = std::max(rows, cols);
  if (longer <= max_side) {
    r.scale = max_side / longer;
  } else {
    r.shrink = (longer + max_side - 1) / max_side;
  }
  return r;
}

Rgb mix(Rgb a, Rgb b, double wb) {
  const auto one = [wb](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(x + (static_cast<double>(y) - x) * wb + 0.5);
  };
  return Rgb{one(a.r, b.r), one(a.g, b.g), one(a.b, b.b)};
}

Rgb pixel_at(const RgbImage& image, int64_t x, int64_t y) {
  const uint8_t* p = image.pixels().data() + (y * image.width() + x) * 3;
  return Rgb{p[0], p[1], p[2]};
}

// Lines every `rows_per_line` / `cols_per_line` cells, and a frame (unshrunk rasters only).
void draw_grid(RgbImage& image, const Raster& r, int64_t rows_per_line, int64_t cols_per_line) {
  const auto shade = [&image](int64_t x, int64_t y) {
    image.set(x, y, mix(pixel_at(image, x, y), kGridLine, kGridWeight));
  };
  for (int64_t c = 0;; c += cols_per_line) {
    const int64_t x = std::min(std::min(c, r.cols) * r.scale, image.width() - 1);
    for (int64_t y = 0; y < image.height(); ++y) shade(x, y);
    if (c >= r.cols) break;
  }
  for (int64_t q = 0;; q += rows_per_line) {
    const int64_t y = std::min(std::min(q, r.rows) * r.scale, image.height() - 1);
    for (int64_t x = 0; x < image.width(); ++x) shade(x, y);
    if (q >= r.rows) break;
  }
}

// Paints pixel (px, py) of the raster grid (a scale x scale square).
void paint(RgbImage& image, const Raster& r, int64_t px, int64_t py, Rgb c) {
  image.fill(px * r.scale, py * r.scale, (px + 1) * r.scale, (py + 1) * r.scale, c);
}

}  // namespace

RgbImage render_block_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side) {
  require(head >= 0 && head < query_heads, "head must be in [0, ", query_heads, "), got ", head);
  const BlockMaskView v = mask.view();
  const Raster r = make_raster(v.num_q_blocks, v.num_k_blocks, max_side);
  const int64_t w = (r.cols + r.shrink - 1) / r.shrink, h = (r.rows + r.shrink - 1) / r.shrink;
  std::vector<uint8_t> cls(static_cast<size_t>(w * h), 0);  // 0 empty, 1 partial, 2 full
  const int64_t mh = v.mask_head(head, query_heads);
  for (int64_t qb = 0; qb < v.num_q_blocks; ++qb) {
    const int64_t row = v.row(mh, qb);
    for (int64_t at = v.row_begin(row); at < v.row_end(row); ++at) {
      uint8_t& c = cls[static_cast<size_t>(qb / r.shrink * w + v.kv_indices[at] / r.shrink)];
      c = std::max<uint8_t>(c, v.kv_full[at] ? 2 : 1);
    }
  }
  RgbImage image(r.width(), r.height());
  const Rgb colours[3] = {kWhite, kPartial, kFull};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) paint(image, r, x, y, colours[cls[static_cast<size_t>(y * w + x)]]);
  if (r.scale >= kGridMinCell) draw_grid(image, r, 1, 1);
  return image;
}

RgbImage render_token_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side) {
  require(head >= 0 && head < query_heads, "head must be in [0, ", query_heads, "), got ", head);
  const BlockMaskView v = mask.view();
  const Raster r = make_raster(v.q_len, v.k_len, max_side);
  const int64_t w = (r.cols + r.shrink - 1) / r.shrink, h = (r.rows + r.shrink - 1) / r.shrink;
  // Per pixel: counts of pairs outside visited blocks, wasted, allowed.
  std::vector<std::array<int32_t, 3>> counts(static_cast<size_t>(w * h), {0, 0, 0});
  std::vector<uint8_t> visited(static_cast<size_t>(v.num_k_blocks));
  const int64_t mh = v.mask_head(head, query_heads);
  for (int64_t qb = 0; qb < v.num_q_blocks; ++qb) {
    std::fill(visited.begin(), visited.end(), uint8_t{0});
    const int64_t row = v.row(mh, qb);
    for (int64_t at = v.row_begin(row); at < v.row_end(row); ++at) visited[v.kv_indices[at]] = 1;
    for (int64_t i = v.q_first(qb); i < v.q_last(qb); ++i)
      for (int64_t j = 0; j < v.k_len; ++j) {
        const int cls = !visited[j / v.block_k] ? 0 : mask.allowed(head, query_heads, i, j) ? 2 : 1;
        ++counts[static_cast<size_t>(i / r.shrink * w + j / r.shrink)][cls];
      }
  }
  RgbImage image(r.width(), r.height());
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const std::array<int32_t, 3>& n = counts[static_cast<size_t>(y * w + x)];
      const double total = static_cast<double>(n[0] + n[1] + n[2]);
      // White, then blend in the wasted and allowed shares.
      const Rgb wasted = mix(kWhite, kWasted, n[1] / total);
      paint(image, r, x, y, mix(wasted, kFull, n[2] / total));
    }
  if (r.shrink == 1 && r.scale * std::min(v.block_q, v.block_k) >= kGridMinCell)
    draw_grid(image, r, v.block_q, v.block_k);
  return image;
}

int64_t mask_pictures_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side) {
  const auto picture = [max_side](int64_t rows, int64_t cols, int64_t cell_bytes) {
    const Raster r = make_raster(rows, cols, max_side);
    const int64_t cells = bytes_for((r.cols + r.shrink - 1) / r.shrink, (r.rows + r.shrink - 1) / r.shrink);
    return add_bytes(bytes_for(cells, cell_bytes), bytes_for(bytes_for(r.width(), r.height()), 3));
  };
  const int64_t blocks = picture(pattern_math::ceil_div(q_len, block_q), pattern_math::ceil_div(k_len, block_k), 1);
  if (q_len > kTokenPictureMaxPairs / k_len) return blocks;
  return add_bytes(blocks, picture(q_len, k_len, sizeof(std::array<int32_t, 3>)));
}

HeadBlocks count_head_blocks(const BlockMask& mask, int64_t head, int64_t query_heads) {
  const BlockMaskView v = mask.view();
  const int64_t mh = v.mask_head(head, query_heads);
  HeadBlocks counts;
  for (int64_t qb = 0; qb < v.num_q_blocks; ++qb) {
    const int64_t row = v.row(mh, qb);
    for (int64_t at = v.row_begin(row); at < v.row_end(row); ++at) {
      ++counts.kept;
      counts.full += v.kv_full[at];
    }
  }
  return counts;
}

std::string token_picture_path(const std::string& out) {
  const std::string ext = ".png";
  const bool has_ext = out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0;
  return (has_ext ? out.substr(0, out.size() - ext.size()) : out) + "_tokens.png";
}

void write_mask_pictures(std::ostream& os, const BlockMask& mask, int64_t head, int64_t query_heads,
                         int64_t max_side, const std::string& out) {
  const RgbImage blocks = render_block_mask(mask, head, query_heads, max_side);
  write_png(out, blocks);
  os << "wrote       " << out << " (" << blocks.width() << " x " << blocks.height() << ")\n";
  if (mask.q_len() <= kTokenPictureMaxPairs / mask.k_len()) {
    const std::string path = token_picture_path(out);
    const RgbImage tokens = render_token_mask(mask, head, query_heads, max_side);
    write_png(path, tokens);
    os << "wrote       " << path << " (" << tokens.width() << " x " << tokens.height() << ")\n";
  }
}

}  // namespace spattn::cli
