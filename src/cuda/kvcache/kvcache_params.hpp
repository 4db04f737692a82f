// cuda/kvcache/kvcache_params.hpp - what the KV-cache kernels receive: the
// call's tensors as device pointers and element strides, the cache's paging,
// the lengths (read on the device), the pattern or chosen pages deciding the
// kept key blocks, and the scratch of the call (kept-block lists, split
// partial results, the status word). Plain structs passed by value.
//
// Key blocks: a paged cache's blocks are its pages (block_keys = page_size,
// logical block n of sequence b in physical page page_table[b][n]); a
// contiguous cache is cut into blocks of kContiguousBlockKeys keys so a
// pattern skips the same way on it.
#pragma once

#include <cstdint>

#include "cuda/common/tensor_arg.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::cuda_detail {

constexpr int64_t kContiguousBlockKeys = 64;

// Where the kernels report the first bad length or page-table entry they meet
// (code 0: none). The host reads it after the call unless a CUDA graph is
// being captured; the rows of a bad sequence are NaN either way.
struct KvCacheStatus {
  int32_t code = 0;  // KvCacheError
  int32_t unused = 0;
  int64_t a = 0, b = 0, c = 0, d = 0;  // the error's numbers (kvcache_launch.cpp says which)
};

enum KvCacheError : int32_t {
  kNoError = 0,
  kBadLength = 1,     // a = sequence, b = cache_seqlens[a], c = keys after the append, d = capacity
  kTooFewKeys = 2,    // a = sequence, b = its keys, c = Lq
  kBadPageEntry = 3,  // a = sequence, b = logical page, c = page_table entry, d = num_pages
  kBadChosenPage = 4, // a = sequence, b = kv head, c = slot, d = the entry
};

struct KvCacheParams {
  // q (B, Hq, Lq, D), out (B, Hq, Lq, D) in q's type or fp32, lse (B, Hq, Lq, 1) fp32 (data null: none).
  TensorArg q, out, lse;
  bool out_f32 = false;
  // Caches (pages or batch, Hkv, rows, D).
  TensorArg k_cache, v_cache;
  int64_t num_pages = 0;                // pages (batch, contiguous) the caches hold
  const int32_t* page_table = nullptr;  // null: contiguous
  int64_t max_pages = 0;
  int64_t page_rows = 0;  // rows per page (the contiguous cache's length)
  int64_t capacity = 0;   // keys a sequence's cache holds
  const int32_t* cache_seqlens = nullptr;
  // New keys and values (B, Hkv, L_new, D) (data null: none).
  TensorArg k_new, v_new;
  int64_t new_rows = 0;
  // Page summaries (num_pages, Hkv, 1, D) fp32 (data null: none).
  TensorArg page_min, page_max;

  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, head_dim = 0;
  float scale_log2 = 0.0f;  // scale * log2(e)

  // What each query row keeps: the pattern's per-head expressions (null:
  // dense), or chosen pages (causal within them).
  const PatternExpr* exprs = nullptr;
  int64_t num_exprs = 0;
  const int32_t* chosen = nullptr;  // batch x Hkv x pages_per_head logical pages, -1 unused
  int64_t pages_per_head = 0;

  // Kept key blocks per (sequence, kv head), made by the block-list kernel.
  int64_t block_keys = 0;   // keys per block
  int64_t max_blocks = 0;   // blocks a sequence can have (row length of `blocks`)
  int32_t* blocks = nullptr;       // batch * Hkv x max_blocks logical blocks, ascending
  uint8_t* block_full = nullptr;   // batch * Hkv x max_blocks: every row of the kv head keeps the whole block
  int32_t* block_count = nullptr;  // batch * Hkv; -1 for a sequence with a bad length or entry

  // The split of each (sequence, kv head, row tile) along its kept blocks.
  int64_t splits = 1;
  int64_t rows_per_cta = 1;  // query rows (query head, row) of a kv head per CTA
  int64_t row_tiles = 1;
  float* part_o = nullptr;    // splits x batch * Hkv x (group * Lq) x D: normalised O of each split
  float* part_lse = nullptr;  // splits x batch * Hkv x (group * Lq): natural-log LSE of each split

  KvCacheStatus* status = nullptr;
};

}  // namespace spattn::cuda_detail
