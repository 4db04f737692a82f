// cuda/select/select_kernels.cuh - the device side of dynamic block selection
// (mean pooling), three launches with no host synchronisation:
//
//   pool_kernel          one CTA per (batch, head, block) of q and of k, q and
//                        k in one launch: the fp32 mean of the block's rows,
//                        per d (pool_kernel_vec: 16-byte loads where the
//                        layout allows, every load of a thread issued before
//                        the first is added).
//   score_select_kernel  one CTA per (batch, mask head, tile of R consecutive
//                        query blocks), R = 8 unless shared memory asks for
//                        fewer. Scores: a thread per key block reads its
//                        pooled key row once and dots it with the tile's R
//                        pooled q rows (shared memory), so the pooled keys
//                        are read once per R rows; per query head of the
//                        row, then a softmax per row (a group of
//                        blockDim / R threads on its own named barrier)
//                        averaged into the row's probabilities. Then each
//                        group, independently of the others, finds the
//                        row's kept blocks without sorting it
//                        (row_threshold.cuh: a radix search by mass for tau,
//                        by count for topk and the budgets of
//                        select_rules.hpp) and compacts them in ascending
//                        order into the row's fixed-capacity slots.
//                        The slots and their full / partial flags are what
//                        the fused select-then-attend path reads.
//   pack_kernel          one CTA per batch element: exclusive scan of the row
//                        counts into row_offsets, then the slots copied into
//                        contiguous kv_indices and kv_full (BlockMask arrays).
// Shared memory of score_select_kernel: the tile's pooled q rows, then per
// row a radix histogram and the logits and probabilities of the next power of
// two >= num_k_blocks key blocks (TileSmem).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/select/row_threshold.cuh"
#include "cuda/select/thread_group.cuh"
#include "select/select_rules.hpp"

namespace spattn::cuda_detail::select_kernels {

constexpr int kPoolThreads = 256;
constexpr int kPoolLoads = 8;  // 16-byte loads a pool thread has in flight
constexpr int kSelectThreads = 256;
constexpr int kMaxTileRows = 8;  // query blocks per score_select_kernel CTA
constexpr int kPackThreads = 1024;

// A (B, H, L, D) input read with arbitrary element strides.
struct PoolInput {
  const void* data = nullptr;
  int64_t stride_b = 0, stride_h = 0, stride_l = 0, stride_d = 0;
  int64_t heads = 0, len = 0, block = 0, num_blocks = 0;
  float* pooled = nullptr;  // (B, heads, num_blocks, D)
};

struct PoolArgs {
  PoolInput q, k;
  int64_t batch = 0, head_dim = 0;
};

struct SelectArgs {
  select_detail::SelectParams p;
  const float* pooled_q = nullptr;  // (B, Hq, nqb, D)
  const float* pooled_k = nullptr;  // (B, Hkv, nkb, D)
  const float* sampled = nullptr;   // (B, Hq, nqb, nkb) logits from sampling: used instead of pooling when set
  int64_t batch = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t mask_heads = 0;  // Hkv, or Hq with per-query-head selection
  int32_t per_query_head = 0;
  int64_t tile_rows = 1;   // R: query blocks per CTA, 1 to kMaxTileRows, blockDim.x / R a warp multiple
  int64_t row_stride = 1;  // P: next power of two >= num_k_blocks
  int64_t capacity = 0;    // slots per row
  int32_t* counts = nullptr;  // (B, mask_heads, nqb)
  int32_t* slots = nullptr;   // (B, mask_heads, nqb, capacity)
  uint8_t* slot_full = nullptr;  // same layout: 1 = full block, 0 = cut by causality
};

struct PackArgs {
  select_detail::SelectParams p;
  int64_t rows = 0;  // mask_heads * nqb per batch element
  int64_t capacity = 0;
  const int32_t* counts = nullptr;
  const int32_t* slots = nullptr;
  const uint8_t* slot_full = nullptr;
  int64_t* row_offsets = nullptr;  // (B, rows + 1)
  int32_t* kv_indices = nullptr;   // (B, rows * capacity), the first row_offsets[rows] used
  uint8_t* kv_full = nullptr;      // same layout as kv_indices
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

// Which input and (batch, head, block) a pool CTA reads.
struct PoolTask {
  const PoolInput* in;
  int64_t id, b, h, l0, l1;
};

__device__ __forceinline__ PoolTask pool_task(const PoolArgs& a) {
  const int64_t q_ctas = a.batch * a.q.heads * a.q.num_blocks;
  const bool is_q = blockIdx.x < q_ctas;
  PoolTask t;
  t.in = is_q ? &a.q : &a.k;
  t.id = is_q ? blockIdx.x : blockIdx.x - q_ctas;
  const int64_t blk = t.id % t.in->num_blocks;
  t.h = (t.id / t.in->num_blocks) % t.in->heads;
  t.b = t.id / (t.in->num_blocks * t.in->heads);
  t.l0 = blk * t.in->block;
  t.l1 = t.l0 + t.in->block < t.in->len ? t.l0 + t.in->block : t.in->len;
  return t;
}

// Any strides: a thread per d walks the block's rows.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(const PoolArgs a) {
  const PoolTask t = pool_task(a);
  const T* base = static_cast<const T*>(t.in->data) + t.b * t.in->stride_b + t.h * t.in->stride_h;
  const float inv = 1.0f / static_cast<float>(t.l1 - t.l0);
  for (int64_t d = threadIdx.x; d < a.head_dim; d += kPoolThreads) {
    float acc = 0.0f;
    for (int64_t l = t.l0; l < t.l1; ++l) acc += to_float(base[l * t.in->stride_l + d * t.in->stride_d]);
    t.in->pooled[t.id * a.head_dim + d] = acc * inv;
  }
}

// Unit stride along d, 16-byte aligned rows, D a multiple of kVec and at most
// kPoolThreads * kVec: each row is read by D / kVec threads with 16-byte
// loads, kPoolThreads / (D / kVec) rows at a time, kPoolLoads rows per thread
// loaded before any is added (a 128-row block of D = 128 bf16 is one round);
// the row groups' sums (at most kPoolThreads * kVec values) are added in
// shared memory.
template <typename T>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel_vec(const PoolArgs a) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float partial[kPoolThreads * kVec];  // (groups, D)
  const PoolTask t = pool_task(a);
  const int64_t lanes = a.head_dim / kVec;      // threads per row
  const int64_t groups = kPoolThreads / lanes;  // rows in flight
  const int64_t lane = threadIdx.x % lanes, group = threadIdx.x / lanes;
  float acc[kVec];
  for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
  if (group < groups) {
    const T* base =
        static_cast<const T*>(t.in->data) + t.b * t.in->stride_b + t.h * t.in->stride_h + lane * kVec;
    for (int64_t l = t.l0 + group; l < t.l1; l += groups * kPoolLoads) {
      uint4 raw[kPoolLoads];
#pragma unroll
      for (int u = 0; u < kPoolLoads; ++u) {
        const int64_t row = l + u * groups;
        raw[u] = row < t.l1 ? __ldg(reinterpret_cast<const uint4*>(base + row * t.in->stride_l))
                            : make_uint4(0u, 0u, 0u, 0u);  // all-zero bits are 0 in every dtype
      }
#pragma unroll
      for (int u = 0; u < kPoolLoads; ++u) {
        const T* x = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
        for (int v = 0; v < kVec; ++v) acc[v] += to_float(x[v]);
      }
    }
    for (int v = 0; v < kVec; ++v) partial[group * a.head_dim + lane * kVec + v] = acc[v];
  }
  __syncthreads();
  const float inv = 1.0f / static_cast<float>(t.l1 - t.l0);
  for (int64_t d = threadIdx.x; d < a.head_dim; d += kPoolThreads) {
    float sum = 0.0f;
    for (int64_t g = 0; g < groups; ++g) sum += partial[g * a.head_dim + d];
    t.in->pooled[t.id * a.head_dim + d] = sum * inv;
  }
}

// ---- score + select ----------------------------------------------------------

// The CTA's shared memory (SelectArgs::tile_rows = R rows, row_stride = P):
//   q_tile  R x D floats, rounded up to 4 (the pooled q rows of one head)
//   hist    R radix histograms (row_threshold.cuh)
//   logits  R x P floats
//   probs   R x P floats
struct TileSmem {
  float* q_tile;
  RadixHistogram* hist;
  float* logits;
  float* probs;
};

SPATTN_HD int64_t q_tile_floats(int64_t rows, int64_t head_dim) { return (rows * head_dim + 3) / 4 * 4; }

SPATTN_HD size_t select_smem_bytes(int64_t rows, int64_t row_stride, int64_t head_dim) {
  return static_cast<size_t>(q_tile_floats(rows, head_dim)) * sizeof(float) +
         static_cast<size_t>(rows) * sizeof(RadixHistogram) +
         static_cast<size_t>(rows * row_stride) * 2 * sizeof(float);
}

// Logits of the tile's rows against key blocks [0, n_tile) of one kv head: a
// thread per key block reads its pooled key row once (16-byte loads when D
// allows) and dots it with every pooled q row of the tile (shared memory,
// read as a broadcast). Row rr keeps the entries below its own n_of[rr].
__device__ void score_tile(const SelectArgs& a, const float* q_tile, const float* pk, int64_t rows,
                           const int32_t* n_of, int64_t n_tile, float* logits) {
  const int64_t D = a.head_dim, P = a.row_stride;
  const float scale = static_cast<float>(a.p.scale);
  for (int64_t c = threadIdx.x; c < n_tile; c += blockDim.x) {
    float acc[kMaxTileRows];
#pragma unroll
    for (int rr = 0; rr < kMaxTileRows; ++rr) acc[rr] = 0.0f;
    const float* kr = pk + c * D;
    if (D % 4 == 0) {
#pragma unroll 2
      for (int64_t d = 0; d < D; d += 4) {
        const float4 kv = __ldg(reinterpret_cast<const float4*>(kr + d));
#pragma unroll
        for (int rr = 0; rr < kMaxTileRows; ++rr)
          if (rr < rows) {
            const float4 qv = *reinterpret_cast<const float4*>(q_tile + rr * D + d);
            acc[rr] = fmaf(qv.x, kv.x, fmaf(qv.y, kv.y, fmaf(qv.z, kv.z, fmaf(qv.w, kv.w, acc[rr]))));
          }
      }
    } else {
      for (int64_t d = 0; d < D; ++d) {
        const float kd = __ldg(kr + d);
#pragma unroll
        for (int rr = 0; rr < kMaxTileRows; ++rr)
          if (rr < rows) acc[rr] = fmaf(q_tile[rr * D + d], kd, acc[rr]);
      }
    }
#pragma unroll
    for (int rr = 0; rr < kMaxTileRows; ++rr)
      if (rr < rows && c < n_of[rr]) logits[rr * P + c] = acc[rr] * scale;
  }
}

// Adds the softmax of one row's logits over [0, n) to its probs, weighted.
__device__ void add_softmax(const ThreadGroup& g, float* logits, float* probs, int64_t n, float weight,
                            float* scratch) {
  float local_max = -INFINITY;
  for (int64_t c = g.rank; c < n; c += g.size) local_max = fmaxf(local_max, logits[c]);
  const float row_max = group_reduce<true>(g, local_max, scratch);
  if (row_max == -INFINITY) return;  // no finite score (a block pair without samples): adds nothing
  float local_sum = 0.0f;
  for (int64_t c = g.rank; c < n; c += g.size) {
    const float e = __expf(logits[c] - row_max);
    logits[c] = e;
    local_sum += e;
  }
  const float inv_sum = weight / group_reduce<false>(g, local_sum, scratch);
  for (int64_t c = g.rank; c < n; c += g.size) probs[c] += logits[c] * inv_sum;
}

// Counts and stores one row (query block qb, n allowed blocks, their
// probabilities in probs): the forced blocks, then the candidates the mode
// asks for (tau: the fewest best whose mass, after the forced blocks', reaches
// tau; 32-bit fixed point), the budgets of kept_count, and the kept blocks
// compacted in ascending order into the row's slots.
__device__ void select_row(const SelectArgs& a, const ThreadGroup& g, int64_t row, int64_t qb, int64_t n,
                           const float* probs, const RowScratch& s) {
  const select_detail::SelectParams& p = a.p;
  g.sync();  // probs complete
  const ForcedBlocks forced = forced_blocks(p, qb);
  const int64_t n_forced = select_detail::forced_count(p, qb, n), candidates = n - n_forced;
  Threshold t;
  int64_t asked = 0;  // candidates the mode asks for
  bool by_mass = false;
  if (!p.use_tau) {
    asked = p.topk - n_forced;
  } else if (p.tau >= 1.0) {
    asked = candidates;
  } else {
    unsigned long long own = 0, forced_mass = 0;
    for (int64_t c = g.rank; c < n; c += g.size)
      if (forced.has(c)) own += fixed_mass(probs[c]);
    group_exclusive_scan(g, own, s.masses, &forced_mass);
    const auto tau_mass = static_cast<unsigned long long>(p.tau * static_cast<double>(kMassUnit) + 0.5);
    if (forced_mass < tau_mass) {
      t = radix_search<true>(g, probs, n, forced, 0, tau_mass - forced_mass, s, &asked);
      by_mass = true;
    }
  }
  const int64_t kept = select_detail::kept_count(p, n_forced + (asked > 0 ? asked : 0), n_forced, n);
  const int64_t need = kept - n_forced;
  if (!(by_mass && need == asked)) {
    t = Threshold{};
    if (need >= candidates)
      t.take_equal = n;
    else if (need > 0)
      t = radix_search<false>(g, probs, n, forced, need, 0ull, s, &asked);
  }
  store_kept(g, p, qb, probs, n, forced, t, a.slots + row * a.capacity, a.slot_full + row * a.capacity, s.counts);
  if (g.rank == 0) a.counts[row] = static_cast<int32_t>(kept);
}

// One CTA per (batch, mask head, tile of R consecutive query blocks).
__global__ void __launch_bounds__(kSelectThreads) score_select_kernel(const SelectArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float fscratch[kMaxTileRows][kWarp];
  __shared__ int32_t iscratch[kMaxTileRows][kWarp];
  __shared__ unsigned long long mscratch[kMaxTileRows][kWarp];
  __shared__ RadixCut cuts[kMaxTileRows];
  const select_detail::SelectParams& p = a.p;
  const int64_t nqb = p.num_q_blocks, R = a.tile_rows, P = a.row_stride, D = a.head_dim;
  const int64_t tiles = (nqb + R - 1) / R;
  const int64_t tile = blockIdx.x % tiles, m = (blockIdx.x / tiles) % a.mask_heads,
                b = blockIdx.x / (tiles * a.mask_heads);
  const int64_t qb0 = tile * R, rows = R < nqb - qb0 ? R : nqb - qb0;
  TileSmem s;
  s.q_tile = reinterpret_cast<float*>(smem);
  s.hist = reinterpret_cast<RadixHistogram*>(s.q_tile + q_tile_floats(R, D));
  s.logits = reinterpret_cast<float*>(s.hist + R);
  s.probs = s.logits + R * P;

  int32_t n_of[kMaxTileRows];  // allowed key blocks per row (num_k_blocks fits in 31 bits)
  int64_t n_tile = 0;
#pragma unroll
  for (int rr = 0; rr < kMaxTileRows; ++rr) {
    n_of[rr] = rr < rows ? static_cast<int32_t>(select_detail::allowed_blocks(p, qb0 + rr)) : 0;
    n_tile = n_of[rr] > n_tile ? n_of[rr] : n_tile;
  }

  // This thread's row group: blockDim.x / R threads, barrier 1 + row.
  const int group_size = static_cast<int>(blockDim.x / R);
  const int r = static_cast<int>(threadIdx.x) / group_size;
  const ThreadGroup g{static_cast<int>(threadIdx.x) % group_size, group_size, 1 + r};
  const bool active = r < rows;
  const int64_t n = active ? select_detail::allowed_blocks(p, qb0 + r) : 0;
  float* probs = s.probs + r * P;
  float* logits = s.logits + r * P;
  for (int64_t c = g.rank; c < n; c += g.size) probs[c] = 0.0f;

  const int64_t group_heads = a.q_heads / a.kv_heads;
  const int64_t heads_per_row = a.per_query_head ? 1 : group_heads;
  for (int64_t t = 0; t < heads_per_row; ++t) {
    const int64_t h = a.per_query_head ? m : m * group_heads + t;
    const float* pq = a.pooled_q + ((b * a.q_heads + h) * nqb + qb0) * D;
    if (a.sampled) {  // logits from antidiagonal samples (sample_kernel.cuh)
      if (active) {
        const float* row_logits = a.sampled + ((b * a.q_heads + h) * nqb + qb0 + r) * p.num_k_blocks;
        g.sync();  // the previous head's logits are consumed
        for (int64_t c = g.rank; c < n; c += g.size) logits[c] = row_logits[c];
        g.sync();
        add_softmax(g, logits, probs, n, 1.0f / static_cast<float>(heads_per_row), fscratch[r]);
      }
      continue;
    }
    const float* pk = a.pooled_k + (b * a.kv_heads + h / group_heads) * p.num_k_blocks * D;
    __syncthreads();  // the previous head's logits and q tile are consumed
    for (int64_t i = threadIdx.x; i < rows * D; i += blockDim.x) s.q_tile[i] = pq[i];
    __syncthreads();
    score_tile(a, s.q_tile, pk, rows, n_of, n_tile, s.logits);
    __syncthreads();
    if (active)
      add_softmax(g, logits, probs, n, 1.0f / static_cast<float>(heads_per_row), fscratch[r]);
  }
  if (active) {
    const int64_t row = (b * a.mask_heads + m) * nqb + qb0 + r;
    select_row(a, g, row, qb0 + r, n, probs, RowScratch{s.hist + r, &cuts[r], iscratch[r], mscratch[r]});
  }
}

// ---- pack --------------------------------------------------------------------

__global__ void __launch_bounds__(kPackThreads) pack_kernel(const PackArgs a) {
  __shared__ int64_t scratch[kWarp];
  const int64_t b = blockIdx.x;
  const int32_t* counts = a.counts + b * a.rows;
  int64_t* offsets = a.row_offsets + b * (a.rows + 1);
  const int64_t chunk = (a.rows + blockDim.x - 1) / blockDim.x;
  const int64_t r0 = threadIdx.x * chunk, r1 = r0 + chunk < a.rows ? r0 + chunk : a.rows;
  int64_t own = 0;
  for (int64_t r = r0; r < r1; ++r) own += counts[r];
  int64_t at = group_exclusive_scan(whole_cta(), own, scratch);
  for (int64_t r = r0; r < r1; ++r) {
    offsets[r] = at;
    at += counts[r];
  }
  if (threadIdx.x == blockDim.x - 1) offsets[a.rows] = at;
  __syncthreads();  // offsets visible to the whole CTA

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  int32_t* indices = a.kv_indices + b * a.rows * a.capacity;
  uint8_t* full = a.kv_full + b * a.rows * a.capacity;
  for (int64_t r = warp; r < a.rows; r += warps) {
    const int64_t from = (b * a.rows + r) * a.capacity;
    for (int64_t e = lane; e < counts[r]; e += kWarp) {
      indices[offsets[r] + e] = a.slots[from + e];
      full[offsets[r] + e] = a.slot_full[from + e];
    }
  }
}

}  // namespace spattn::cuda_detail::select_kernels
