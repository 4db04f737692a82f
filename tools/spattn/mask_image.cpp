// tools/spattn/mask_image.cpp - the block and token panels of a BlockMask
// (see mask_image.hpp).
//
// Both panels first classify cells (per block or per pair), accumulate the
// classes per pixel, then colour each pixel and overlay the block grid.
#include "mask_image.hpp"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/memory.hpp"

namespace spattn::cli {

namespace {

// How cells map to pixels: each cell is `scale` pixels wide, or each pixel
// covers `shrink` cells along each axis.
struct Raster {
  int64_t rows, cols;
  int64_t scale = 1, shrink = 1;
  int64_t width() const { return (cols + shrink - 1) / shrink * scale; }
  int64_t height() const { return (rows + shrink - 1) / shrink * scale; }
  double pixels_per_cell() const { return static_cast<double>(scale) / static_cast<double>(shrink); }
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

// Lines every `rows_per_line` / `cols_per_line` cells, and a frame (unshrunk rasters only).
void draw_grid(RgbImage& image, const Raster& r, int64_t rows_per_line, int64_t cols_per_line) {
  const auto shade = [&image](int64_t x, int64_t y) {
    image.set(x, y, blend(image.at(x, y), kMaskGrid, kMaskGridWeight));
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

MaskPanel render_block_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side) {
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
  const Rgb colours[3] = {kMaskEmpty, kMaskPartial, kMaskFull};
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) paint(image, r, x, y, colours[cls[static_cast<size_t>(y * w + x)]]);
  if (r.scale >= kGridMinCell) draw_grid(image, r, 1, 1);
  return MaskPanel{std::move(image), r.pixels_per_cell()};
}

MaskPanel render_token_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side,
                            int64_t* allowed_pairs) {
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
  int64_t allowed = 0;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const std::array<int32_t, 3>& n = counts[static_cast<size_t>(y * w + x)];
      const double total = static_cast<double>(n[0] + n[1] + n[2]);
      allowed += n[2];
      // White, then blend in the wasted and allowed shares.
      const Rgb wasted = blend(kMaskEmpty, kMaskWasted, n[1] / total);
      paint(image, r, x, y, blend(wasted, kMaskFull, n[2] / total));
    }
  if (r.shrink == 1 && r.scale * std::min(v.block_q, v.block_k) >= kGridMinCell)
    draw_grid(image, r, v.block_q, v.block_k);
  if (allowed_pairs) *allowed_pairs += allowed;
  return MaskPanel{std::move(image), r.pixels_per_cell()};
}

int64_t mask_panels_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side) {
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

}  // namespace spattn::cli
