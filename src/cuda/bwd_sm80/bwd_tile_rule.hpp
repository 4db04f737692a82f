// cuda/bwd_sm80/bwd_tile_rule.hpp - which pairs of a 64 x 64 tile the
// backward kernels keep, and where each pair's bit sits in a thread's keep
// word. Plain host/device code: the kernels run it per lane
// (bwd_tile_mask.cuh adds the shuffles), the tests run it lane by lane on
// the host against BlockMask::allowed.
//
// A thread holds 2 rows x 16 columns of its warp's 16 x 64 product (the mma
// C layout: rows g and g + 8, columns 8n + 2t + c; g = lane / 4,
// t = lane % 4), so its keep bits fit one 32-bit word: bit
// keep_bit(n, r) = 16 * (r / 2) + 2n + r % 2 for accumulator entry s[n][r].
// The product rows are the warp's keys in the dK/dV kernel (columns: the
// tile's query rows) and the warp's query rows in the dQ kernel (columns:
// the tile's keys).
//
// allowed_keys is the rule, once per query row and 64 keys: none for a row
// past the queries, no key past the keys; on a full tile every other key;
// on a partial one, on derived lists (blocks smaller than the tile) the keys
// of kept sub-blocks, whole where the sub-block is full and else by the
// pattern predicate, on the mask's own lists every key by the predicate
// (through its span form where the pattern has one, row_key_bits.hpp, as
// in the forward kernels). The lanes of a warp evaluate it for the rows and
// keys the warp needs; the gather_* functions then assemble each thread's
// word from the lanes' words, `fetch(...)` standing for the shuffle.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/common/row_key_bits.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

#if defined(__CUDACC__)
#define SPATTN_BWD_OUT_OF_LINE __host__ __device__ __noinline__
#else
#define SPATTN_BWD_OUT_OF_LINE
#endif

namespace spattn::cuda_detail {

// One tile step: its first query row and key, and what the plan says of it.
struct BwdTile {
  int64_t q0 = 0, k0 = 0;
  bool full = false;                       // every pair allowed (but pairs outside the sequences)
  uint64_t sub_present = 0, sub_full = 0;  // derived lists: the kept and the full sub-blocks
};

// The bit of accumulator entry s[n][r] in a thread's keep word.
SPATTN_HD int keep_bit(int n, int r) { return 16 * (r >> 1) + 2 * n + (r & 1); }

SPATTN_HD int lowest_set_bit(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __ffsll(static_cast<long long>(x)) - 1;
#else
  return __builtin_ctzll(static_cast<unsigned long long>(x));
#endif
}

// The keys among `candidates` (bit k: key k0 + k) the expression allows in
// query row i at position p, tested one by one: the patterns without a span
// form (fixed, BigBird, Longformer).
SPATTN_HD uint64_t bwd_keys_one_by_one(const PatternExpr& expr, int64_t h, int64_t i,
                                                           int64_t p, int64_t k0, uint64_t candidates) {
  uint64_t word = 0;
  for (uint64_t left = candidates; left != 0; left &= left - 1) {
    const int k = lowest_set_bit(left);
    if (expr_allows(expr, h, i, p, k0 + k)) word |= uint64_t{1} << k;
  }
  return word;
}

// The keys among `candidates` (bit k: key k0 + k) the expression allows in
// query row i at position p: through the span form where the pattern has
// one (row_key_bits.hpp), else one by one. Out of line on the device: only
// partial tiles call it, and its two inlined copies made the dK/dV kernel
// several times longer.
inline SPATTN_BWD_OUT_OF_LINE uint64_t bwd_row_predicate(const PatternExpr& expr, int64_t h, int64_t i, int64_t p, int64_t k0,
                                     uint64_t candidates) {
  uint64_t allowed;
  if (!expr_row_word(expr, h, i, p, k0, allowed)) allowed = bwd_keys_one_by_one(expr, h, i, p, k0, candidates);
  return allowed & candidates;
}

// The keys among the tile's 64 and `candidates` (bit k: key k0 + k) that row
// `row` of the tile (query i = q0 + row) of query head h, whose expression
// is `expr`, keeps.
SPATTN_HD uint64_t allowed_keys(const BwdShape& shape, const BwdPlanView& plan, const BwdTile& tile,
                                const PatternExpr* expr, int64_t h, int row, uint64_t candidates) {
  const int64_t i = tile.q0 + row;
  if (i >= shape.q_len) return 0;
  const int64_t keys_left = shape.k_len - tile.k0;  // >= 1
  if (keys_left < 64) candidates &= pattern_math::bit_run(0, static_cast<int>(keys_left) - 1);
  if (tile.full) return candidates;
  uint64_t word = 0, to_test = candidates;
  if (plan.sub_present != nullptr) {
    const int first = (row >> plan.sub_row_shift) * plan.sub_cols, shift = plan.sub_col_shift;
    const uint64_t present = tile.sub_present >> first, full = tile.sub_full >> first;
    uint64_t present_keys = 0, full_keys = 0;
    for (int c = 0; c < plan.sub_cols; ++c) {
      const uint64_t run = pattern_math::bit_run(c << shift, ((c + 1) << shift) - 1);
      if ((present >> c) & 1) present_keys |= run;
      if ((full >> c) & 1) full_keys |= run;
    }
    word = to_test & present_keys & full_keys;
    to_test &= present_keys & ~full_keys;
  }
  if (to_test != 0) word |= bwd_row_predicate(*expr, h, i, i + (shape.k_len - shape.q_len), tile.k0, to_test);
  return word;
}

// ---- dK/dV kernel: product rows are the warp's keys 16 w + g (+ 8) ----

// Lane `lane` of warp `warp` evaluates query row lane + 32 * second of the
// tile over the warp's 16 keys: the half of the row's 64-key word holding them.
SPATTN_HD uint32_t key_rows_lane_word(const BwdShape& shape, const BwdPlanView& plan, const BwdTile& tile,
                                      const PatternExpr* expr, int64_t h, int warp, int lane, int second) {
  const uint64_t warp_keys = uint64_t{0xffff} << (16 * warp);
  return static_cast<uint32_t>(allowed_keys(shape, plan, tile, expr, h, lane + 32 * second, warp_keys) >>
                               (32 * (warp >> 1)));
}

// A thread's keep word from the lanes' words: entry (key, query q) is bit
// key of q's word, at lane q % 32 (second = q >= 32). fetch(second, src)
// returns that word of lane src.
template <typename Fetch>
SPATTN_HD uint32_t gather_key_rows_keep(const Fetch& fetch, int warp, int lane) {
  const int key_bit = 16 * (warp & 1) + lane / 4;  // key row g's bit in the warp's half
  const int t = lane % 4;
  uint32_t keep = 0;
  for (int n = 0; n < 8; ++n)
    for (int c = 0; c < 2; ++c) {
      const uint32_t keys = fetch(n >= 4 ? 1 : 0, (8 * n + 2 * t + c) & 31);
      keep |= ((keys >> key_bit) & 1u) << keep_bit(n, c);
      keep |= ((keys >> (key_bit + 8)) & 1u) << keep_bit(n, 2 + c);
    }
  return keep;
}

// ---- dQ kernel: product rows are the warp's query rows 16 w + g (+ 8) ----

// Lane `lane` of warp `warp` evaluates row 16 w + lane % 16 of the tile over
// keys 32 (lane / 16) .. + 31: that half of its 64-key word.
SPATTN_HD uint32_t query_rows_lane_word(const BwdShape& shape, const BwdPlanView& plan, const BwdTile& tile,
                                        const PatternExpr* expr, int64_t h, int warp, int lane) {
  const int half = lane / 16;
  const uint64_t word =
      allowed_keys(shape, plan, tile, expr, h, 16 * warp + lane % 16, uint64_t{0xffffffffu} << (32 * half));
  return static_cast<uint32_t>(word >> (32 * half));
}

// A thread's keep word from the lanes' words: row g + 8 r's keys are the
// halves of lanes g + 8 r and g + 8 r + 16; the thread picks its columns
// (thread_columns). fetch(src) returns lane src's word.
template <typename Fetch>
SPATTN_HD uint32_t gather_query_rows_keep(const Fetch& fetch, int lane) {
  const int g = lane / 4, first_col = 2 * (lane % 4);
  uint32_t keep = 0;
  for (int r = 0; r < 2; ++r) {
    const uint32_t lo = fetch(g + 8 * r), hi = fetch(g + 8 * r + 16);
    keep |= thread_columns(static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32, first_col) << (16 * r);
  }
  return keep;
}

// ---- both ----

// Keep bits of the columns below `cols_left` (a full tile over the end of the walked side).
SPATTN_HD uint32_t columns_below(int64_t cols_left, int lane) {
  uint32_t keep = 0;
  for (int n = 0; n < 8; ++n)
    for (int r = 0; r < 4; ++r)
      if (8 * n + 2 * (lane % 4) + (r & 1) < cols_left) keep |= 1u << keep_bit(n, r);
  return keep;
}

}  // namespace spattn::cuda_detail
