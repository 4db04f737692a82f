// kernel_args.hpp - the plain interface between the fast CPU driver and its
// SIMD kernels.
//
// The driver (cpu_attention.cpp) hands the kernel one work item at a time: a
// group of query tiles of one (batch, head) that share their keys, the list of
// key chunks they visit, in order, and those chunks' keys and values staged
// as fp32. A chunk is read once from memory and used by every tile that
// visits it, so K/V traffic is divided by the number of tiles in the group.
// The kernels are compiled per instruction set (AVX-512, AVX2, portable); this
// header is included by those translation units, so it holds only plain data
// and no inline code: nothing compiled with wider instructions can leak into
// generic code.
#pragma once

#include <cstdint>

namespace spattn::cpu_fast {

// Fills bits[j] for keys first + j, j < count: bit i is set when query row i of
// the tile may attend to that key. Implemented in generic code (partial_bits.cpp).
using AllowedBitsFn = void (*)(const void* context, int64_t first, int64_t count, uint64_t* bits);

// One query tile: up to TileKernel::tile_rows (M) consecutive rows of one head.
// All arrays are 64-byte aligned.
struct QueryTile {
  // (head_dim, M): the queries transposed and multiplied by scale * log2(e);
  // lanes past the tile's rows are zero.
  const float* q_t = nullptr;
  // Results: (head_dim, M) unnormalised output transposed, and per lane the
  // running max (log2 domain, -inf while no key was allowed) and sum.
  float* acc_t = nullptr;
  float* row_max = nullptr;
  float* row_sum = nullptr;
  // Passed to allowed_bits for this tile's partial chunks.
  const void* mask_context = nullptr;
};

// At most TileKernel::chunk_keys consecutive keys and the tiles that visit them.
struct KeyChunk {
  int64_t first = 0;     // key index in the sequence
  int64_t count = 0;
  int64_t staged = 0;    // index of its first key among the item's staged keys
  uint64_t tiles = 0;    // bit t: tile t visits these keys
  uint64_t partial = 0;  // bit t: tile t tests each pair with the predicate
};

constexpr int64_t kMaxGroupTiles = 64;  // tiles per work item (bit sets above)

// Rows of a tensor that the kernel pulls into the cache while it computes, a
// share per chunk: the queries of the item the thread runs next.
struct PrefetchRows {
  const char* base = nullptr;  // the first row; nullptr: nothing to prefetch
  int64_t row_stride = 0;      // bytes
  int64_t rows = 0;
  int64_t row_bytes = 0;
};

struct TileGroupArgs {
  int64_t head_dim = 0;
  // fp32 key rows, unit stride along head_dim: the row of key j of a chunk is
  // k + (keys_by_index ? j : its staged row) * k_row_stride (kv_stage.hpp).
  const float* k = nullptr;
  int64_t k_row_stride = 0;
  bool keys_by_index = false;
  // Values staged in panels of head dims: the panel of dims [d0, d0 + w)
  // holds v_panels[d0 * staged_keys + s * w + r] = V[key of staged row s][d0 + r].
  const float* v_panels = nullptr;
  int64_t staged_keys = 0;
  QueryTile* tiles = nullptr;
  int64_t num_tiles = 0;
  const KeyChunk* chunks = nullptr;
  int64_t num_chunks = 0;
  AllowedBitsFn allowed_bits = nullptr;
  PrefetchRows prefetch;
  // Scratch: (N, M) scores then probabilities, N lane masks, M chunk maxima.
  float* scores = nullptr;
  uint64_t* bits = nullptr;
  float* chunk_max = nullptr;
};

// A compiled kernel for one instruction set.
struct TileKernel {
  const char* isa = "";
  int64_t tile_rows = 0;    // M: query rows per tile, a multiple of the vector width
  int64_t chunk_keys = 0;   // N: most keys per chunk
  int64_t value_panel = 0;  // widest value panel (head dims per register tile)
  void (*run)(const TileGroupArgs& args) = nullptr;
  // dst[c * dst_stride + r] = src[r * src_stride + c] * col_scale[c] for
  // r < rows, c < cols: packs query tiles.
  void (*transpose)(const float* src, int64_t src_stride, int64_t rows, int64_t cols,
                    const float* col_scale, float* dst, int64_t dst_stride) = nullptr;
  // Runs `iterations` steps of independent fp32 FMAs on this thread and returns
  // the number of floating-point operations performed (for the peak benchmark).
  double (*fma_loop)(int64_t iterations) = nullptr;
  // transpose for results that are not read again soon (output tiles): it
  // may write with non-temporal stores, which skip reading each destination
  // line into the cache first, and fences them before it returns.
  void (*transpose_out)(const float* src, int64_t src_stride, int64_t rows, int64_t cols,
                        const float* col_scale, float* dst, int64_t dst_stride) = nullptr;
};

}  // namespace spattn::cpu_fast
