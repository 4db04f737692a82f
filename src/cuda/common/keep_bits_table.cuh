// cuda/common/keep_bits_table.cuh - the keep bits of the tiles a fused
// kernel masks, made by a kernel of their own when the call's plan is made
// and owned by the plan, so that the attention kernel's threads load a masked
// tile's bits (one vector load each) instead of evaluating the pattern there
// (computed_keep_bits, tile_mask.cuh), on the path between two of their
// products.
//
// The table (KeepBitsArg) holds, per head class (keep_bit_classes.hpp), per
// masked entry of the plan (the partial ones, numbered by
// DeviceTilePlanView::partial_slots; every entry in a dilated split's
// permuted pass), per query tile of the entry's block row and per key tile
// of the entry, each kernel thread's KeepBits words, thread after thread.
// The table's kernel fills them with computed_keep_bits for the same warp
// and lane, so a thread loads exactly the bits it would have computed.
#pragma once

#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_mask.cuh"
#include "cuda/common/tile_walk.cuh"
#include "spattn/error.hpp"

namespace spattn::cuda_detail {

// The expression masked tiles read when the mask has none (every partial
// tile of such a plan has only full sub-blocks, so it is never evaluated).
__device__ const PatternExpr kNoPatternExpr{};

// A table of kernel Tr, whose tiles' bits are held by kThreads threads
// (warps 0, 1, ... as the kernel passes them to tile_keep_bits).
template <typename Tr, int kThreads>
struct KeepBitsTable {
  static constexpr int kWords = KeepBits<Tr>::kWords;
  static constexpr int64_t kTileWords = int64_t{kThreads} * kWords;
  // Tables above this size are not made (the kernel computes the bits).
  static constexpr int64_t kMaxBytes = int64_t{128} << 20;

  // The table's entries: masked ones of the plan (every entry of a permuted pass).
  static SPATTN_HD int64_t masked_entries(const FwdParams& p) {
    return p.exclude.kind == Exclusion::FullRuns ? p.plan.num_entries : p.plan.num_partial_entries;
  }

  // The table's layout: the words of one query tile of an entry (its key
  // tiles), and of an entry (its query tiles), in the integer type I (64-bit
  // for the table's size on the host, 32-bit in the kernels: kMaxBytes keeps
  // every offset of a table that is made within 32 bits).
  template <typename I>
  static SPATTN_HD I q_tile_words(const FwdParams& p) {
    return static_cast<I>(p.plan.blocks.block_k / Tr::kBlockN) * static_cast<I>(kTileWords);
  }
  template <typename I>
  static SPATTN_HD I entry_words(const FwdParams& p) {
    return static_cast<I>(p.plan.blocks.block_q / Tr::kBlockM) * q_tile_words<I>(p);
  }

  // The words of p's table; 0 where it makes none.
  static int64_t words(const FwdParams& p) {
    if (p.keep_bits.classes <= 0 || p.plan.partial_slots == nullptr) return 0;
    const int64_t words = p.keep_bits.classes * masked_entries(p) * entry_words<int64_t>(p);
    return words * 4 <= kMaxBytes ? words : 0;
  }

  static_assert(kMaxBytes / 4 <= INT32_MAX, "a table's offsets fit 32 bits");
};

// Where one work unit's tiles lie in the table, for one thread: the words of
// the tile at entry e (its place among the masked entries) and key sub-tile
// s start at first + e * Table::entry_words(p) + s * kTileWords. `first` is made
// once per unit (query head h, query tile q_tile), so that a tile's address
// costs two multiply-adds; zero where the call has no table.
template <typename Tr, int kThreads>
struct KeepBitsRows {
  using Table = KeepBitsTable<Tr, kThreads>;
  static constexpr int32_t kTileWords = static_cast<int32_t>(Table::kTileWords);
  int32_t first = 0;

  // A unit of the call's kernel: none where the call has no table.
  static __device__ __forceinline__ KeepBitsRows of_unit(const FwdParams& p, int64_t h, int64_t q_tile, int thread) {
    return p.keep_bits.words != nullptr ? of(p, h, q_tile, thread) : KeepBitsRows{};
  }

  // Of query head h's query tile q_tile (p.keep_bits.classes > 0) for
  // `thread`: warp * 32 + lane, as the kernel passes them to tile_keep_bits.
  static __device__ __forceinline__ KeepBitsRows of(const FwdParams& p, int64_t h, int64_t q_tile, int thread) {
    // The classes divide the heads per mask head (keep_bit_classes), so h's
    // class within its mask head is h % classes.
    const int32_t head_class = static_cast<int32_t>(h) % p.keep_bits.classes;
    const int32_t q_tiles_per_block = static_cast<int32_t>(p.plan.blocks.block_q / Tr::kBlockM);
    KeepBitsRows rows;
    rows.first = head_class * static_cast<int32_t>(p.keep_bits.masked_entries) *
                     Table::template entry_words<int32_t>(p) +
                 static_cast<int32_t>(q_tile) % q_tiles_per_block * Table::template q_tile_words<int32_t>(p) +
                 thread * Table::kWords;
    return rows;
  }

  // The first of this thread's words of the tile at `walk`.
  __device__ __forceinline__ int32_t at(const FwdParams& p, const TileWalk& walk) const {
    const int32_t entry =
        p.exclude.kind == Exclusion::FullRuns ? static_cast<int32_t>(walk.at) : p.plan.partial_slots[walk.at];
    return first + entry * Table::template entry_words<int32_t>(p) + static_cast<int32_t>(walk.sub) * kTileWords;
  }
};

// The keep bits of a tile as a kernel thread holds them: from the call's
// table where it has one, else computed.
template <typename Tr, int kThreads>
__device__ __forceinline__ KeepBits<Tr> tile_keep_bits(const FwdParams& p, const KeepBitsRows<Tr, kThreads>& rows,
                                                       const PatternExpr& expr, const TileWalk& tile, bool full,
                                                       const SequenceSpan& seq, int64_t h, int64_t q0, int64_t k0,
                                                       int warp, int lane) {
  using Table = KeepBitsTable<Tr, kThreads>;
  if (p.keep_bits.words == nullptr) return computed_keep_bits<Tr>(p, expr, tile, full, seq, h, q0, k0, warp, lane);
  if (!tile_is_masked(p, full)) return KeepBits<Tr>::all();
  const uint32_t* from = p.keep_bits.words + rows.at(p, tile);
  KeepBits<Tr> keep;
  if constexpr (Table::kWords % 4 == 0) {
#pragma unroll
    for (int w = 0; w < Table::kWords; w += 4) {
      const uint4 x = __ldg(reinterpret_cast<const uint4*>(from + w));
      keep.word[w] = x.x, keep.word[w + 1] = x.y, keep.word[w + 2] = x.z, keep.word[w + 3] = x.w;
    }
  } else if constexpr (Table::kWords % 2 == 0) {
#pragma unroll
    for (int w = 0; w < Table::kWords; w += 2) {
      const uint2 x = __ldg(reinterpret_cast<const uint2*>(from + w));
      keep.word[w] = x.x, keep.word[w + 1] = x.y;
    }
  } else {
#pragma unroll
    for (int w = 0; w < Table::kWords; ++w) keep.word[w] = __ldg(from + w);
  }
  return keep;
}

// One CTA per (plan row, head class): the row's entries in chunks of
// kThreads, each thread testing one; then, for each masked entry of the
// chunk, every thread's bits of each of its key tiles the kernel visits.
// (A regular batch: its sequences share the bits.)
template <typename Tr, int kThreads>
__global__ void __launch_bounds__(kThreads) keep_bits_table_kernel(const FwdParams p, uint32_t* table) {
  using Table = KeepBitsTable<Tr, kThreads>;
  __shared__ int64_t masked[kThreads];
  __shared__ int count;
  const DeviceTilePlanView& plan = p.plan;
  const int64_t mask_head = blockIdx.x / plan.num_q_tiles, q_tile = blockIdx.x % plan.num_q_tiles;
  const int64_t h = mask_head * (p.q_heads / plan.blocks.num_heads) + blockIdx.y;
  const PatternExpr& expr = p.mask.exprs != nullptr ? *p.mask.expr_for_head(h, p.q_heads) : kNoPatternExpr;
  const SequenceSpan seq = sequence_span(p, 0);
  const int64_t q0 = q_tile * Tr::kBlockM, tiles_per_block = plan.blocks.block_k / Tr::kBlockN;
  const int64_t block_row = plan.blocks.row(mask_head, q0 / plan.blocks.block_q);
  const int64_t begin = plan.blocks.row_begin(block_row), end = plan.blocks.row_end(block_row);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const KeepBitsRows<Tr, kThreads> rows = KeepBitsRows<Tr, kThreads>::of(p, h, q_tile, static_cast<int>(threadIdx.x));
  for (int64_t chunk = begin; chunk < end; chunk += kThreads) {
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    const int64_t at = chunk + threadIdx.x;
    if (at < end && tile_is_masked(p, plan.blocks.kv_full[at] != 0)) masked[atomicAdd(&count, 1)] = at;
    __syncthreads();
    for (int n = 0; n < count; ++n) {
      TileWalk walk = TileWalk::entries(masked[n], end);
      const bool full = walk.full(plan);
      for (; walk.sub < tiles_per_block && walk.valid(plan, tiles_per_block, Tr::kBlockN, seq.k_len); ++walk.sub) {
        const int64_t k0 = walk.key_tile(plan, tiles_per_block) * Tr::kBlockN;
        const KeepBits<Tr> keep = computed_keep_bits<Tr>(p, expr, walk, full, seq, h, q0, k0, warp, lane);
        uint32_t* to = table + rows.at(p, walk);
#pragma unroll
        for (int w = 0; w < Table::kWords; ++w) to[w] = keep.word[w];
      }
    }
    __syncthreads();
  }
}

// Makes the table of keep bits of a call `p` (its plan, exclusion and head
// classes set) where it has one: allocates it, fills it on `stream` and
// points p.keep_bits at it; returns the table's memory (empty where the call
// has none: its kernel then computes the bits).
template <typename Tr, int kThreads>
DevicePtr make_keep_bits_table(FwdParams& p, cudaStream_t stream) {
  using Table = KeepBitsTable<Tr, kThreads>;
  static_assert(Tr::kMAtoms * 16 == Tr::kWarpRows && Tr::kNAtoms * 8 == Tr::kBlockN,
                "the tile, its threads and their warp rows fix the layout of the threads' words");
  const int64_t words = Table::words(p);
  if (words == 0) return DevicePtr();
  require(p.keep_bits.classes <= 65535, "CUDA backend: ", p.keep_bits.classes,
          " head classes of keep bits exceed the grid's 65535");
  const int64_t rows = p.plan.blocks.num_heads * p.plan.num_q_tiles;
  require(rows <= INT32_MAX, "CUDA backend: ", rows, " plan rows exceed the grid's 2^31 - 1");
  p.keep_bits.masked_entries = Table::masked_entries(p);
  DevicePtr table = device_alloc(static_cast<size_t>(words) * 4, "cudaMalloc of a keep-bits table");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(p.keep_bits.classes));
  keep_bits_table_kernel<Tr, kThreads><<<grid, kThreads, 0, stream>>>(p, static_cast<uint32_t*>(table.get()));
  check_launch("keep bits table kernel launch");
  p.keep_bits.words = static_cast<const uint32_t*>(table.get());
  return table;
}

}  // namespace spattn::cuda_detail
