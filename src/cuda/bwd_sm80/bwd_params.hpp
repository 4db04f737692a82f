// cuda/bwd_sm80/bwd_params.hpp - what the backward kernels receive: plain
// structs of device pointers and 64-bit strides, passed by value at launch.
//
// BwdParams is the call (shapes, the tensors, the scale, the fp32 row
// scratch the delta kernel fills); BwdPlanView is the backward plan, the
// mask's block lists at the granularity the kernels walk, query-major and
// key-major (bwd_plan.hpp builds and owns its arrays).
#pragma once

#include <cstdint>

#include "cuda/common/tensor_arg.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

// Query rows and keys of the tile both gradient kernels walk; the plan's granularity.
constexpr int64_t kBwdTileSide = 64;

// A (B, H, L) fp32 tensor: the forward's LSE, the LSE gradient.
struct BwdRowTensor {
  const float* data = nullptr;  // null: absent (the LSE gradient only)
  int64_t stride_b = 0, stride_h = 0, stride_l = 0;

  SPATTN_HD float at(int64_t b, int64_t h, int64_t l) const {
    return data[b * stride_b + h * stride_h + l * stride_l];
  }
};

struct BwdShape {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, k_len = 0, head_dim = 0;

  SPATTN_HD int64_t group() const { return q_heads / kv_heads; }  // query heads per kv head
};

// Per (batch, query head) row, written by the delta kernel and read by both
// gradient kernels: the LSE in log2 units (+inf for a row without an allowed
// key, so that its weights are exp2(-inf) = 0, and for the padding rows)
// and delta = d_out . out - d_lse (0 for those rows). Row i of (b, h) is
// entry (b * q_heads + h) * row_stride + i; row_stride is q_len rounded up to
// the tile, so a tile's 64 entries are whole and 16-byte aligned.
struct BwdRowStats {
  float* lse_log2 = nullptr;
  float* delta = nullptr;
  int64_t row_stride = 0;

  SPATTN_HD int64_t row(int64_t b, int64_t h, int64_t q_heads, int64_t i) const {
    return (b * q_heads + h) * row_stride + i;
  }
};

struct BwdParams {
  BwdShape shape;
  TensorArg q, k, v, d_out;  // fp16 or bf16, one type
  TensorArg out;             // the forward's output, read by the delta kernel only
  bool out_f32 = false;      // out holds fp32 instead of the input type
  BwdRowTensor lse, d_lse;
  TensorArg dq, dk, dv;      // written: the input type, or fp32 when grads_f32
  bool grads_f32 = false;
  BwdRowStats stats;
  float scale = 1.0f;       // softmax scale (> 0)
  float scale_log2 = 1.0f;  // scale * log2(e): weights go through exp2
};

// The backward plan on the device. The walked lists are the mask's own
// where its blocks are multiples of the 64 x 64 tile (a block then spans
// q_tiles_per_block x k_tiles_per_block tiles), else the mask re-expressed
// at tile granularity (one tile per block, each entry with its sub-block
// bits, cuda/plan/tile_plan.hpp). Query-major: for (mask head, query
// block), its key blocks, ascending, with their full flags (the forward's
// lists). Key-major: for (mask head, key block), the query blocks keeping
// it, ascending, with their full flags and their positions in the
// query-major lists (where the sub-block bits are).
struct BwdPlanView {
  int64_t num_heads = 0;                    // mask heads
  int64_t num_q_blocks = 0, num_k_blocks = 0;  // of the walked lists
  int64_t q_tiles_per_block = 1, k_tiles_per_block = 1;
  int64_t num_q_tiles = 0, num_k_tiles = 0;  // ceil(L / 64)

  const int64_t* row_offsets = nullptr;  // num_heads * num_q_blocks + 1
  const int32_t* kv_indices = nullptr;
  const uint8_t* kv_full = nullptr;

  const int64_t* col_offsets = nullptr;  // num_heads * num_k_blocks + 1
  const int32_t* q_indices = nullptr;
  const uint8_t* q_full = nullptr;
  const int64_t* q_forward = nullptr;  // the entry's query-major position; null for the mask's own lists

  // Per query-major entry of derived lists (null for the mask's own): the
  // sub-blocks kept and those full, bit (row >> sub_row_shift) * sub_cols +
  // (key >> sub_col_shift) for a pair at (row, key) inside the tile.
  const uint64_t* sub_present = nullptr;
  const uint64_t* sub_full = nullptr;
  int32_t sub_row_shift = 0, sub_col_shift = 0, sub_cols = 1;

  // The pattern's expressions (one, or one per query head group); null where
  // no block is partial.
  const PatternExpr* exprs = nullptr;
  int64_t num_exprs = 0;

  // Tiles by descending work (the launch order of the CTAs).
  const int32_t* q_tile_order = nullptr;  // num_q_tiles
  const int32_t* k_tile_order = nullptr;  // num_k_tiles

  // Query heads per mask head and per expression for a call of `query_heads`
  // (each divides it; one 64-bit division per CTA, then 32-bit ones per head).
  SPATTN_HD int32_t heads_per_mask_head(int64_t query_heads) const {
    return static_cast<int32_t>(query_heads / num_heads);
  }
  SPATTN_HD int32_t heads_per_expr(int64_t query_heads) const {
    return num_exprs > 0 ? static_cast<int32_t>(query_heads / num_exprs) : 1;
  }
  // The expression of query head h (Pattern::expr_for_head); null without expressions.
  SPATTN_HD const PatternExpr* expr_of(int32_t h, int32_t per_expr) const {
    return exprs == nullptr ? nullptr : exprs + h / per_expr;
  }
};

}  // namespace spattn::cuda_detail
