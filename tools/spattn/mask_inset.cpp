// tools/spattn/mask_inset.cpp - choosing and drawing the token-level inset
// (see mask_inset.hpp).
#include "mask_inset.hpp"

#include <algorithm>
#include <vector>

#include "mask_image.hpp"

namespace spattn::cli {

namespace {

constexpr int64_t kInsetMinSide = 32, kInsetMaxSide = 64;

// Side of the inset along an axis of `len` tokens in blocks of `block`.
int64_t inset_side(int64_t len, int64_t block) {
  return std::min({len, kInsetMaxSide, std::max(kInsetMinSide, 2 * block)});
}

// First of `side` tokens about centred on `centre`, kept within [0, len):
// a multiple of the block size (of half the side, when a block is larger) so
// that the inset's block lines fall where its numbers do.
int64_t centred_start(int64_t centre, int64_t side, int64_t len, int64_t block) {
  const int64_t align = std::max<int64_t>(1, std::min(block, side / 2));
  const int64_t start = (centre - side / 2 + align / 2) / align * align;
  return std::clamp<int64_t>(start, 0, len - side);
}

struct BlockShare {
  int64_t allowed = 0, pairs = 0;
  int64_t q_lo, q_hi, k_lo, k_hi;  // the allowed pairs' bounding box (inclusive), when allowed > 0
};

BlockShare share_of(const BlockMask& mask, const BlockMaskView& v, int64_t head, int64_t query_heads, int64_t qb,
                    int64_t kb) {
  BlockShare s{0, 0, v.q_last(qb), v.q_first(qb), v.k_last(kb), v.k_first(kb)};
  for (int64_t i = v.q_first(qb); i < v.q_last(qb); ++i)
    for (int64_t j = v.k_first(kb); j < v.k_last(kb); ++j) {
      ++s.pairs;
      if (!mask.allowed(head, query_heads, i, j)) continue;
      ++s.allowed;
      s.q_lo = std::min(s.q_lo, i);
      s.q_hi = std::max(s.q_hi, i);
      s.k_lo = std::min(s.k_lo, j);
      s.k_hi = std::max(s.k_hi, j);
    }
  return s;
}

}  // namespace

std::optional<PairRegion> inset_region(const BlockMask& mask, int64_t head, int64_t query_heads) {
  const BlockMaskView v = mask.view();
  const int64_t mh = v.mask_head(head, query_heads);
  std::vector<std::pair<int64_t, int64_t>> partial;  // (query block, key block), row-major
  for (int64_t qb = 0; qb < v.num_q_blocks; ++qb) {
    const int64_t row = v.row(mh, qb);
    for (int64_t at = v.row_begin(row); at < v.row_end(row); ++at)
      if (!v.kv_full[at]) partial.emplace_back(qb, v.kv_indices[at]);
  }
  const int64_t count = static_cast<int64_t>(partial.size());
  const int64_t examined = std::min(count, kInsetCandidates);
  std::optional<BlockShare> best;
  for (int64_t n = 0; n < examined; ++n) {
    const auto [qb, kb] = partial[static_cast<size_t>(n * count / examined)];
    const BlockShare s = share_of(mask, v, head, query_heads, qb, kb);
    // Sparser than half, and sparser than the best so far (a * d < c * b compares a/b with c/d).
    if (2 * s.allowed >= s.pairs) continue;
    if (!best || s.allowed * best->pairs < best->allowed * s.pairs) best = s;
  }
  if (!best) return std::nullopt;
  PairRegion r;
  r.rows = inset_side(v.q_len, v.block_q);
  r.cols = inset_side(v.k_len, v.block_k);
  if (best->allowed == 0) {  // a visited block with no allowed pair: centre on the block
    best->q_lo = best->q_hi = best->q_lo - v.block_q / 2;
    best->k_lo = best->k_hi = best->k_lo - v.block_k / 2;
  }
  r.q0 = centred_start((best->q_lo + best->q_hi + 1) / 2, r.rows, v.q_len, v.block_q);
  r.k0 = centred_start((best->k_lo + best->k_hi + 1) / 2, r.cols, v.k_len, v.block_k);
  return r;
}

RgbImage render_pair_region(const BlockMask& mask, int64_t head, int64_t query_heads, const PairRegion& region,
                            int64_t pixels_per_pair) {
  const BlockMaskView v = mask.view();
  const int64_t mh = v.mask_head(head, query_heads);
  const int64_t ppp = pixels_per_pair;
  RgbImage image(region.cols * ppp, region.rows * ppp);
  std::vector<uint8_t> visited(static_cast<size_t>(v.num_k_blocks));
  for (int64_t i = region.q0; i < region.q0 + region.rows; ++i) {
    std::fill(visited.begin(), visited.end(), uint8_t{0});
    const int64_t row = v.row(mh, i / v.block_q);
    for (int64_t at = v.row_begin(row); at < v.row_end(row); ++at) visited[v.kv_indices[at]] = 1;
    for (int64_t j = region.k0; j < region.k0 + region.cols; ++j) {
      const Rgb c = !visited[j / v.block_k] ? kMaskEmpty
                    : mask.allowed(head, query_heads, i, j) ? kMaskFull
                                                            : kMaskWasted;
      const int64_t x = (j - region.k0) * ppp, y = (i - region.q0) * ppp;
      image.fill(x, y, x + ppp, y + ppp, c);
    }
  }
  // Block boundaries inside the region.
  for (int64_t j = region.k0 + 1; j < region.k0 + region.cols; ++j)
    if (j % v.block_k == 0)
      for (int64_t y = 0; y < image.height(); ++y) {
        const int64_t x = (j - region.k0) * ppp;
        image.set(x, y, blend(image.at(x, y), kMaskGrid, kMaskGridWeight));
      }
  for (int64_t i = region.q0 + 1; i < region.q0 + region.rows; ++i)
    if (i % v.block_q == 0)
      for (int64_t x = 0; x < image.width(); ++x) {
        const int64_t y = (i - region.q0) * ppp;
        image.set(x, y, blend(image.at(x, y), kMaskGrid, kMaskGridWeight));
      }
  return image;
}

}  // namespace spattn::cli
