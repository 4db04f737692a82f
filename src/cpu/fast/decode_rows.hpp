// cpu/fast/decode_rows.hpp - the fast CPU backend's path for calls of few
// query rows over many keys (decoding, a few speculative tokens): the tile
// kernel computes tiles of 32-64 query rows, so a call of one row per head
// would spend almost all of its work on empty rows. Here each (batch, kv head)
// walks its kept key blocks once for all the rows of its query heads that
// share a mask row: the block's keys and values are converted to fp32 once,
// every row scores them (fp32 dot products over D), and each row keeps an
// online softmax (a running max, sum and fp32 accumulator), with the
// non-finite semantics of spattn/attention.hpp. Work is split over
// (batch, kv head) pairs.
#pragma once

#include <cstdint>

#include "spattn/attention.hpp"

namespace spattn::cpu_fast {

// Query rows of one kv head (q_len x its query heads) up to which a call takes this path.
constexpr int64_t kDecodeRows = 16;

// Does a call of `shape` take this path (few rows per kv head, as many
// (batch, kv head) pairs as it needs to occupy the threads)?
bool decode_rows_fit(const CallShape& shape);

// Where a call's keys and values live: views whose batch b holds sequence
// b's rows, or the pages of a KV cache (spattn/kvcache.hpp): k and v are
// (num_pages, Hkv, page_size, D) and key j of sequence b lies in row
// j % page_size of page page_table[b * max_pages + j / page_size], every
// page a call reads checked by its caller.
struct KeyRows {
  TensorView k, v;
  const int32_t* page_table = nullptr;
  int64_t max_pages = 0, page_size = 0;
};

// Runs a call validated against `mask` (whose lengths are the call's); out
// and lse (when given) are written. Only the key blocks the mask keeps are read.
void run_decode_rows(const TensorView& q, const KeyRows& keys, const TensorView& out, const BlockMask& mask,
                     double scale, const TensorView* lse);

}  // namespace spattn::cpu_fast
