// cuda/common/fwd_params.hpp - the arguments of a forward attention kernel: a
// plain struct of device pointers, 64-bit strides and the mask views, passed
// by value at launch. Shared by the fused and the naive kernels.
#pragma once

#include <cstdint>

#include "cuda/common/tensor_arg.hpp"
#include "cuda/plan/device_plan_view.hpp"

namespace spattn::cuda_detail {

// The pairs a pass of a dilated split (dilated_split.hpp) leaves to the other
// pass, masked out in registers:
//   Rest (partial tiles only): for rows at positions [p_lo, p_hi) congruent to
//     h modulo `rate`, the keys of the row's segment with that residue (up to
//     the row itself when causal);
//   FullRuns (every tile; the permuted pass): for permuted row i (group
//     i / group, member i % group, original position first_position +
//     (i / group) * segment + h % rate + (i % group) * rate), the members of
//     its group whose keys lie in the full run of the row's original query
//     block: runs[2 * (head * num_q_blocks + block)] .. [+1] (end exclusive),
//     head = h when runs_per_head, else 0.
enum class Exclusion : int32_t { None = 0, Rest = 1, FullRuns = 2 };

struct DilatedExclusion {
  Exclusion kind = Exclusion::None;
  int32_t causal = 0;
  int64_t segment = 0, rate = 1, p_lo = 0, p_hi = 0;
  int64_t group = 1, first_position = 0, shift = 0, block_q = 1, num_q_blocks = 0;
  // Rest: the index of the dilated term in the pattern's expression (-1: none).
  int32_t term = -1;
  const int32_t* runs = nullptr;
  bool runs_per_head = false;

  // The term that rows at positions [lo, hi) may leave out of their predicate
  // (-1: none): the rest pass's dilated term where they all lie in
  // [p_lo, p_hi), since every pair of it there is excluded.
  SPATTN_HD int32_t term_left_out(int64_t lo, int64_t hi) const {
    return kind == Exclusion::Rest && lo >= p_lo && hi <= p_hi ? term : -1;
  }
};

// A packed batch of variable-length sequences (attention_varlen): sequence b
// owns rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of the batch-1 q and out
// and [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v (device arrays of
// batch + 1 entries); null for a regular batch. See sequence_span.hpp.
// total_q and total_k are the packed tensors' row counts (the sm90 kernel's
// tensor maps cover them; the unit order of both kernels weighs total_k's K
// and V against L2).
struct VarlenArg {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;
};

// The query heads packed into each kv head's rows. A call with G query heads
// per kv head sharing the mask and few query positions (packed_query_heads
// in kernel_choice.hpp) runs as kv_heads heads of q_len = positions x G rows,
// row r of head j being query position r / G of query head j G + r % G (one
// position: q, out and the LSE viewed so by their strides; more: copies in
// that order, packed_rows.hpp), so that one tile holds them all and K and V
// are read once per kv head; row r is then the mask's query row r / G.
struct PackedHeads {
  int32_t heads = 0;  // G; 0: none
  SPATTN_HD bool any() const { return heads != 0; }
  // Tile row r's mask row: r / G, or r itself for none.
  SPATTN_HD int mask_row(int r) const { return heads != 0 ? r / heads : r; }
};

// Keep bits of the tiles a fused kernel masks, made on a kind of call's
// first use and kept with the mask (common/keep_bits_table.cuh) instead of
// computed by the kernel's threads at each such tile. The host sets
// `classes` (keep_bit_classes, common/keep_bit_classes.hpp, dividing the
// heads per mask head): query head h of a plan row shares its bits with the
// row's heads of the same h % classes; 0 where no table is made. The
// launch then sets `words` (null: the kernel computes the bits) and
// `masked_entries`, the entries of the plan whose tiles the table holds.
struct KeepBitsArg {
  int32_t classes = 0;
  const uint32_t* words = nullptr;
  int64_t masked_entries = 0;
};

struct FwdParams {
  TensorArg q, k, v, out;
  bool out_f32 = false;  // out holds fp32 instead of the input type
  float* lse = nullptr;  // optional fp32 (B, H, Lq)
  int64_t lse_stride_b = 0, lse_stride_h = 0, lse_stride_l = 0;
  // The LSE of row l of head h of batch element b.
  SPATTN_HD float* lse_at(int64_t b, int64_t h, int64_t l) const {
    return lse + b * lse_stride_b + h * lse_stride_h + l * lse_stride_l;
  }
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, k_len = 0, head_dim = 0;
  float scale = 1.0f;       // softmax scale (> 0)
  float scale_log2 = 1.0f;  // scale * log2(e): scores go through exp2
  DeviceMaskView mask;
  DeviceTilePlanView plan;  // fused kernel only
  DilatedExclusion exclude;  // fused kernel only
  // The permuted pass of a dilated split reads q, k and v in place: its row n
  // of query head h is row h % residue_rate + n * residue_rate of the
  // tensors, whose data start at the first regular position. 1 everywhere
  // else.
  int64_t residue_rate = 1;
  // Query head h's residue in that pass (0 elsewhere): the offset of its
  // rows in q, k, v and out (a TMA coordinate on sm90). Heads and the rate
  // fit 32 bits.
  SPATTN_HD int32_t head_residue(int64_t h) const {
    return static_cast<int32_t>(h) % static_cast<int32_t>(residue_rate);
  }
  // That pass writes its rows straight into out and the LSE (the rows
  // h % residue_rate + n * residue_rate from the first regular row on),
  // merged with the rest pass's result they hold (write_output). False
  // everywhere else.
  bool merge_into_out = false;
  // In that pass, whether the rest pass's mask keeps any block: where it
  // keeps none, its rows hold O = 0 and LSE = -inf, and the merge writes
  // them without reading them first.
  bool rest_keeps_blocks = true;
  // The query heads packed into each kv head's rows (PackedHeads).
  PackedHeads packed;
  VarlenArg varlen;          // fused kernel only; q_len, k_len are then the mask's
  KeepBitsArg keep_bits;     // fused kernel only
  // Partial results of split rows (fused kernel, plan.num_slots > 0): per
  // (slot, batch * heads of a mask head, tile row) the normalised O (head_dim
  // floats) and the natural-log LSE.
  float* partial_o = nullptr;
  float* partial_lse = nullptr;
};

}  // namespace spattn::cuda_detail
