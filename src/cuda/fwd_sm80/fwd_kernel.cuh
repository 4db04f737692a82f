// cuda/fwd_sm80/fwd_kernel.cuh - the portable fused block-sparse attention
// forward kernel (sm80 and newer): FlashAttention-2 structure on mma.sync.
//
// One CTA per (work item, batch, head): a work item is the row of kept key
// tiles of one 128-row query tile, or a piece of a long row (tile_plan.hpp);
// items launch in the plan's longest-first order, item-major or copy-major
// as the launch chooses (common/work_units.hpp). The CTA keeps its Q tile in
// shared memory and walks only its kept key tiles (tile_walk.cuh):
//   wait K(n); start loading V(n)            (cp.async)
//   S = Q K(n)^T                             (ldmatrix + mma.m16n8k16, fp32)
//   mask S: nothing on full tiles, key bounds on a ragged last tile, the
//           sub-block bits and the pattern predicate on partial tiles; in
//           the passes of a dilated split, the other pass's pairs
//           (DilatedExclusion in fwd_params.hpp)
//   wait V(n); start loading K(n+1)
//   online softmax in fp32 with exp2: P = exp2(S * scale * log2(e) - m)
//   O += P V(n)                              (P straight from registers)
// Runs of full tiles take a second copy of this loop, without the
// partial-tile code (same-run on an H100: dense +5%, causal +4% at D = 128).
// The barrier sits before the softmax, not after it, so that the softmax and
// the P V product run back to back between barriers and the K(n + 1) copy
// overlaps both (about 2% on dense D = 128, with fewer spills). The next
// tile's index is read at the top of the step for the same reason.
// then O / l and the LSE are written (a piece of a split row writes them in
// fp32 to its partial-result slot instead; split_combine.cu merges). The
// permuted pass of a dilated split reads its groups' rows of q, k and v in
// place (rows step by FwdParams::residue_rate) and merges each row into the
// rest pass's result in out and the LSE. A row with no allowed key keeps
// m = -inf and l = 0 and writes O = 0, LSE = -inf.
// In a packed varlen batch the batch index is the sequence: its rows and
// lengths come from cu_seqlens (sequence_span.hpp), the mask (built for the
// longest sequence, one row per position) is read as is, a tile's query rows
// are its mask rows less the sequence's Lk - Lq, and tiles without a query row
// of the sequence are skipped.
//
// Per warp, S (32 x 64) and O (32 x D) live in registers in the mma C layout:
// thread (g = lane / 4, t = lane % 4) holds rows g and g + 8 of each 16-row
// tile and columns 2t, 2t + 1 of each 8-column tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/keep_bits_table.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_mask.cuh"
#include "cuda/common/tile_walk.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm80/fwd_traits.cuh"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

// Byte address in shared memory of 16-byte chunk `chunk` of row `row` of a
// swizzled tile.
template <typename Tr>
__device__ __forceinline__ uint32_t tile_address(uint32_t base, int row, int chunk) {
  return base + static_cast<uint32_t>((row * Tr::kSmemStride + ((chunk ^ (row & 7)) << 3)) *
                                      static_cast<int>(sizeof(typename Tr::T)));
}

// The fragment loops step a thread's chunk by 2 (16 columns) and its row by 16.
// A row's chunks fill the low bits of its byte offset (kSmemStride / 8 chunks,
// a power of two, times 16 bytes), so with c0 < 2 and row0 fixed,
//   offset(row0 + 16 r, 2 j + c0) = (offset(row0, c0) ^ (32 j)) + 16 r * kRowBytes:
// one XOR per 16-column step and an immediate per 16-row step, instead of a
// separately swizzled address (and register) per fragment.
template <typename Tr>
struct FragStep {
  static constexpr uint32_t kRowBytes = Tr::kSmemStride * sizeof(typename Tr::T);
  static constexpr uint32_t kRows16 = 16 * kRowBytes;  // 16 rows further
  static_assert((Tr::kSmemStride / 8 & (Tr::kSmemStride / 8 - 1)) == 0, "chunks per row are a power of two");
  __device__ __forceinline__ static uint32_t chunks(int j) { return static_cast<uint32_t>(j) * 32u; }
};

// Starts copying rows [row0, row0 + kRows) of a (L, D) slice into a swizzled
// shared-memory tile; rows outside [0, len) are zero-filled (a varlen query
// tile may start before its sequence's first row, see sequence_span.hpp). Threads are laid
// over the padded row (kSmemStride / 8 chunks), so each thread keeps one chunk
// column and steps down the rows: one pointer and one address per thread.
template <typename Tr, int kRows>
__device__ __forceinline__ void load_tile(uint32_t smem, const typename Tr::T* src, int64_t row_stride,
                                          int64_t row0, int64_t len) {
  constexpr int kChunksPerRow = Tr::kSmemStride / 8;
  constexpr int kRowsPerPass = Tr::kThreads / kChunksPerRow;
  static_assert(Tr::kThreads % kChunksPerRow == 0 && kRows % kRowsPerPass == 0, "tile rows split evenly");
  static_assert(kRowsPerPass % 8 == 0, "the swizzle of a thread's chunk is the same on every pass");
  const int chunk = static_cast<int>(threadIdx.x) % kChunksPerRow;
  const int row = static_cast<int>(threadIdx.x) / kChunksPerRow;
  if (chunk >= Tr::kRowChunks) return;  // padding columns of head dims 32 and 96
  const int64_t first = row0 + row;  // rows outside [0, len) are zero-filled
  // An element offset, made a pointer only for rows that exist (a row before
  // the slice would point before it).
  int64_t at = first * row_stride + chunk * 8;
  const uint32_t to = tile_address<Tr>(smem, row, chunk);
#pragma unroll
  for (int n = 0; n < kRows / kRowsPerPass; ++n) {
    const int64_t r = first + n * kRowsPerPass;
    const bool valid = r >= 0 && r < len;
    cp_async_16(to + n * kRowsPerPass * Tr::kSmemStride * sizeof(typename Tr::T), valid ? src + at : src, valid);
    at += kRowsPerPass * row_stride;
  }
}

// s[a][n] += Q(rows of this warp) K(n-th 8 keys)^T over the whole head dim.
template <typename Tr>
__device__ __forceinline__ void multiply_qk(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], uint32_t sQ, uint32_t sK,
                                            int warp, int lane) {
  using T = typename Tr::T;
  using Step = FragStep<Tr>;
  const uint32_t q_off = tile_address<Tr>(0, warp * Tr::kWarpRows + (lane & 15), lane >> 4);
  const uint32_t k_off = tile_address<Tr>(0, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
#pragma unroll
  for (int ks = 0; ks < Tr::kHeadDim / 16; ++ks) {
    const uint32_t q_at = sQ + (q_off ^ Step::chunks(ks)), k_at = sK + (k_off ^ Step::chunks(ks));
    uint32_t qa[Tr::kMAtoms][4];
#pragma unroll
    for (int a = 0; a < Tr::kMAtoms; ++a) ldmatrix_x4(qa[a], q_at + a * Step::kRows16);
#pragma unroll
    for (int np = 0; np < Tr::kNAtoms / 2; ++np) {
      uint32_t kb[4];
      ldmatrix_x4(kb, k_at + np * Step::kRows16);
#pragma unroll
      for (int a = 0; a < Tr::kMAtoms; ++a) {
        mma_16816<T>(s[a][2 * np], qa[a], kb[0], kb[1]);
        mma_16816<T>(s[a][2 * np + 1], qa[a], kb[2], kb[3]);
      }
    }
  }
}

// o[a][d] += P V: P is s (already exponentiated) rounded to T, V from shared memory.
template <typename Tr>
__device__ __forceinline__ void multiply_pv(float (&o)[Tr::kMAtoms][Tr::kDAtoms][4],
                                            const float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], uint32_t sV, int lane) {
  using T = typename Tr::T;
  using Step = FragStep<Tr>;
  const uint32_t v_off = tile_address<Tr>(0, (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4);
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    uint32_t pa[Tr::kMAtoms][4];
#pragma unroll
    for (int a = 0; a < Tr::kMAtoms; ++a) {
      pa[a][0] = pack2<T>(s[a][2 * kk][0], s[a][2 * kk][1]);
      pa[a][1] = pack2<T>(s[a][2 * kk][2], s[a][2 * kk][3]);
      pa[a][2] = pack2<T>(s[a][2 * kk + 1][0], s[a][2 * kk + 1][1]);
      pa[a][3] = pack2<T>(s[a][2 * kk + 1][2], s[a][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < Tr::kDAtoms / 2; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sV + (v_off ^ Step::chunks(dp)) + kk * Step::kRows16);
#pragma unroll
      for (int a = 0; a < Tr::kMAtoms; ++a) {
        mma_16816<T>(o[a][2 * dp], pa[a], vb[0], vb[1]);
        mma_16816<T>(o[a][2 * dp + 1], pa[a], vb[2], vb[3]);
      }
    }
  }
}

// kPermutedPass: the permuted pass of a dilated split (FwdParams::residue_rate,
// merge_into_out), compiled as a kernel of its own so that every other call's
// kernel keeps its machine code (the same code with run-time tests cost the
// sm80 kernel 3% on dense attention, same run on an H100).
template <typename Tr, bool kPermutedPass>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocksPerSm)
    fwd_sm80_kernel(const FwdParams p, const UnitOrder order) {
  using T = typename Tr::T;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sQ = smem_address(smem);
  const uint32_t sK = sQ + Tr::kQElems * sizeof(T);
  const uint32_t sV = sK + Tr::kKVElems * sizeof(T);
  PatternExpr& expr = *reinterpret_cast<PatternExpr*>(smem + Tr::kExprOffset);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  allow_dependent_launch();  // the merge of split rows may launch now and wait for this grid

  // ---- the work item, then batch and head inside the mask head ----
  const DeviceTilePlanView& plan = p.plan;
  const WorkUnits units(p, order);
  const UnitPlace place = locate_unit(plan, units, blockIdx.x);
  const int64_t heads_per_mask_head = units.heads_per_mask_head;
  const int64_t copies = units.copies;  // CTAs per work item
  const WorkItem work = plan.items[place.item];
  const int64_t copy = place.copy;  // b * heads_per_mask_head + head in the mask head
  const int64_t b = copy / heads_per_mask_head;
  const int64_t mask_head = work.row / plan.num_q_tiles, q_tile = work.row % plan.num_q_tiles;
  const int64_t h = mask_head * heads_per_mask_head + copy % heads_per_mask_head;
  const int64_t kv_head = h / (p.q_heads / p.kv_heads);
  const int64_t tiles_per_block = plan.blocks.block_k / Tr::kBlockN;
  // A varlen sequence shorter than the mask: its query tiles without a row of
  // it do nothing (the combine step of a split row skips their rows too), and
  // its walk stops at the first key tile past its keys (entries ascend). The
  // span is read again for the output so that fewer registers stay live.
  const SequenceSpan seq = sequence_span(p, b);
  const int64_t q0 = q_tile * Tr::kBlockM - seq.mask_row_offset;  // query row of the tile's first row
  if (!seq.tile_has_rows(q0, Tr::kBlockM)) return;

  // In the permuted pass of a dilated split, row n of query head h is row
  // h % rate + n * rate of q, k and v.
  // (The row strides are formed at each copy, as the plain kernel reads them
  // from its parameters there, so that its machine code stays the same.)
  const int64_t residue = kPermutedPass ? p.head_residue(h) : 0;
  const auto rows_apart = [&](const TensorArg& t) {
    return kPermutedPass ? t.stride_l * p.residue_rate : t.stride_l;
  };
  const T* q = static_cast<const T*>(p.q.data) + p.q.row_offset(seq.batch, h, seq.q_first + residue);
  const T* k = static_cast<const T*>(p.k.data) + p.k.row_offset(seq.batch, kv_head, seq.k_first + residue);
  const T* v = static_cast<const T*>(p.v.data) + p.v.row_offset(seq.batch, kv_head, seq.k_first + residue);

  if (p.mask.exprs != nullptr) {
    const uint32_t* from = reinterpret_cast<const uint32_t*>(p.mask.expr_for_head(h, p.q_heads));
    uint32_t* to = reinterpret_cast<uint32_t*>(&expr);
    for (int n = static_cast<int>(threadIdx.x); n < static_cast<int>(sizeof(PatternExpr) / 4); n += Tr::kThreads)
      to[n] = from[n];
  }

  TileWalk walk = TileWalk::entries(work.begin, work.end);
  bool has_tile = walk.valid(plan, tiles_per_block, Tr::kBlockN, seq.k_len);
  load_tile<Tr, Tr::kBlockM>(sQ, q, rows_apart(p.q), q0, seq.q_len);
  if (has_tile) load_tile<Tr, Tr::kBlockN>(sK, k, rows_apart(p.k), walk.key_tile(plan, tiles_per_block) * Tr::kBlockN, seq.k_len);
  cp_async_commit();

  float o[Tr::kMAtoms][Tr::kDAtoms][4];
  float m[Tr::kMAtoms][2], l[Tr::kMAtoms][2];
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a) {
#pragma unroll
    for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[a][d][c] = 0.0f;
    m[a][0] = m[a][1] = kNegInf;
    l[a][0] = l[a][1] = 0.0f;
  }

  // The tile loop, compiled twice: runs of full tiles without a dilated
  // split's exclusion (every tile but those of its permuted pass) take a copy
  // without the partial-tile code, so that the predicate's registers do not
  // shape the full tiles' allocation; each copy leaves its loop where the
  // next tile needs the other.
  const bool lean = p.exclude.kind != Exclusion::FullRuns;
  const auto run_tiles = [&](auto full_tiles) {
    constexpr bool kFullTiles = decltype(full_tiles)::value;
    bool same_kind = true;
    while (has_tile && same_kind) {
      const int64_t k0 = walk.key_tile(plan, tiles_per_block) * Tr::kBlockN;
      const bool full = kFullTiles || walk.full(plan);
      // The next tile's index is read now so that its load latency hides behind this tile's work.
      TileWalk next = walk;
      next.advance(tiles_per_block);
      has_tile = next.valid(plan, tiles_per_block, Tr::kBlockN, seq.k_len);
      same_kind = !lean || !has_tile || next.full(plan) == kFullTiles;
      const int64_t next_k0 = has_tile ? next.key_tile(plan, tiles_per_block) * Tr::kBlockN : 0;
      cp_async_wait<0>();
      __syncthreads();  // K(n) (and Q, the expression) visible to all; V buffer free
      load_tile<Tr, Tr::kBlockN>(sV, v, rows_apart(p.v), k0, seq.k_len);
      cp_async_commit();

      // The predicate runs before S is live, so its registers do not compete with S.
      const KeepBits<Tr> keep =
          kFullTiles ? KeepBits<Tr>::all()
                     : tile_keep_bits<Tr, Tr::kThreads>(  // the table row formed per tile (held across tiles, it spills)
                           p, KeepBitsRows<Tr, Tr::kThreads>::of_unit(p, h, q0 / Tr::kBlockM, warp * 32 + lane),
                           expr, walk, full, seq, h, q0, k0, warp, lane);
      float s[Tr::kMAtoms][Tr::kNAtoms][4];
#pragma unroll
      for (int a = 0; a < Tr::kMAtoms; ++a)
#pragma unroll
        for (int n = 0; n < Tr::kNAtoms; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[a][n][c] = 0.0f;
      multiply_qk<Tr>(s, sQ, sK, warp, lane);
      mask_scores<Tr>(s, full, keep, k0, seq.k_len, lane);

      cp_async_wait<0>();
      __syncthreads();  // V(n) visible to all; every warp is done reading K(n)
      if (has_tile) load_tile<Tr, Tr::kBlockN>(sK, k, rows_apart(p.k), next_k0, seq.k_len);
      cp_async_commit();
      softmax_update<Tr>(s, o, m, l, p.scale_log2);
      multiply_pv<Tr>(o, s, sV, lane);
      walk = next;
    }
  };
  while (has_tile) {
    if (lean && walk.full(plan))
      run_tiles(std::true_type{});
    else
      run_tiles(std::false_type{});
  }
  cp_async_wait<0>();  // a row without tiles still has its Q copy in flight
  const SequenceSpan out_seq = sequence_span(p, b);
  if (work.slot < 0)
    write_output<Tr, kPermutedPass>(p, o, m, l, out_seq, h, q0, warp, lane);
  else
    write_partial<Tr>(p, o, m, l, out_seq, q0, (work.slot * copies + copy) * Tr::kBlockM, warp, lane);
}

}  // namespace spattn::cuda_detail
