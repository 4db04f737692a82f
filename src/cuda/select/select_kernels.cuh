// cuda/select/select_kernels.cuh - the device side of dynamic block selection
// (mean pooling), three launches with no host synchronisation:
//
//   pool_kernel          one CTA per (batch, head, block) of q and of k: the
//                        fp32 mean of the block's rows, per d (16-byte loads
//                        where the layout allows, pool_kernel_vec).
//   score_select_kernel  one CTA per (batch, mask head, tile of R consecutive
//                        query blocks), R = 8 unless shared memory asks for
//                        fewer. Scores: a thread per key block reads its
//                        pooled key row once and dots it with the tile's R
//                        pooled q rows (shared memory), so the pooled keys
//                        are read once per R rows; per query head of the
//                        row, then a softmax per row (a group of
//                        blockDim / R threads on its own named barrier)
//                        averaged into the row's probabilities. Then each
//                        group, independently of the others: 64-bit sort
//                        keys (forced flag | probability bits | ~index) in a
//                        shared-memory bitonic sort (descending: forced
//                        first, then probability, ties to the lower index),
//                        the count rule (topk, or a scan of the sorted mass
//                        against tau; then the budgets of select_rules.hpp),
//                        and the kept blocks compacted in ascending order
//                        into the row's fixed-capacity slots.
//                        The slots and their full / partial flags are what
//                        the fused select-then-attend path reads.
//   pack_kernel          one CTA per batch element: exclusive scan of the row
//                        counts into row_offsets, then the slots copied into
//                        contiguous kv_indices and kv_full (BlockMask arrays).
// Shared memory of score_select_kernel: per row, keys (8 B) and probabilities
// (4 B) for the next power of two >= num_k_blocks, plus the tile's pooled q
// rows (TileSmem).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "select/select_rules.hpp"

namespace spattn::cuda_detail::select_kernels {

constexpr int kPoolThreads = 128;
constexpr int kSelectThreads = 256;
constexpr int kMaxTileRows = 8;  // query blocks per score_select_kernel CTA
constexpr int kPackThreads = 1024;
constexpr int kWarp = 32;
constexpr uint32_t kIndexMask = 0x7fffffffu;

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
// loads, kPoolThreads / (D / kVec) rows at a time; the row groups' sums
// (at most kPoolThreads * kVec values) are added in shared memory.
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
#pragma unroll 4
    for (int64_t l = t.l0 + group; l < t.l1; l += groups) {
      const uint4 raw = *reinterpret_cast<const uint4*>(base + l * t.in->stride_l);
      const T* x = reinterpret_cast<const T*>(&raw);
      for (int v = 0; v < kVec; ++v) acc[v] += to_float(x[v]);
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

// ---- thread groups -----------------------------------------------------------

// A run of whole warps of the CTA that works on one row and synchronises on
// its own named barrier (barrier 0 with every thread is __syncthreads).
struct ThreadGroup {
  int rank, size, barrier;
  __device__ void sync() const { asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(size) : "memory"); }
};

__device__ __forceinline__ ThreadGroup whole_cta() {
  return ThreadGroup{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), 0};
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Reduces x over the group (sum or max); every thread of it gets the result.
template <bool kMax>
__device__ float group_reduce(const ThreadGroup& g, float x, float* scratch) {
  const int lane = g.rank % kWarp, warp = g.rank / kWarp, warps = g.size / kWarp;
  x = kMax ? warp_max(x) : warp_sum(x);
  g.sync();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  g.sync();
  x = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(x) : warp_sum(x);
}

// Exclusive scan over the group's threads of one value each; returns this
// thread's prefix and, in *total, the sum of all values.
template <typename V>
__device__ V group_exclusive_scan(const ThreadGroup& g, V x, V* scratch, V* total = nullptr) {
  const int lane = g.rank % kWarp, warp = g.rank / kWarp, warps = g.size / kWarp;
  V inclusive = x;
  for (int o = 1; o < kWarp; o <<= 1) {
    const V up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  g.sync();
  if (lane == kWarp - 1) scratch[warp] = inclusive;
  g.sync();
  V warp_prefix = 0, sum = 0;
  for (int w = 0; w < warps; ++w) {
    if (w < warp) warp_prefix += scratch[w];
    sum += scratch[w];
  }
  if (total) *total = sum;
  return warp_prefix + inclusive - x;
}

// Sorts keys[0, n) descending; n is a power of two.
__device__ void bitonic_sort_descending(const ThreadGroup& g, uint64_t* keys, int64_t n) {
  for (int64_t k = 2; k <= n; k <<= 1) {
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      for (int64_t i = g.rank; i < n; i += g.size) {
        const int64_t partner = i ^ j;
        if (partner > i) {
          const uint64_t x = keys[i], y = keys[partner];
          const bool descending = (i & k) == 0;
          if (descending ? x < y : x > y) {
            keys[i] = y;
            keys[partner] = x;
          }
        }
      }
      g.sync();
    }
  }
}

__device__ __forceinline__ uint64_t sort_key(bool forced, float prob, int64_t c) {
  const uint32_t bits = prob >= 0.0f ? __float_as_uint(prob) : 0u;  // NaN ranks last
  return (static_cast<uint64_t>(forced) << 63) | (static_cast<uint64_t>(bits) << 31) |
         static_cast<uint64_t>(kIndexMask - static_cast<uint32_t>(c));
}
__device__ __forceinline__ float key_prob(uint64_t key) {
  return __uint_as_float(static_cast<uint32_t>(key >> 31) & kIndexMask);
}
__device__ __forceinline__ int64_t key_index(uint64_t key) {
  return kIndexMask - static_cast<uint32_t>(key & kIndexMask);
}

__device__ __forceinline__ int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---- score + select ----------------------------------------------------------

// The CTA's shared memory (SelectArgs::tile_rows = R rows, row_stride = P):
//   q_tile  R x D floats, rounded up to 4 (the pooled q rows of one head)
//   keys    R x P uint64 (a row's logits alias its first P floats)
//   probs   R x P floats
struct TileSmem {
  float* q_tile;
  uint64_t* keys;
  float* probs;
};

SPATTN_HD int64_t q_tile_floats(int64_t rows, int64_t head_dim) { return (rows * head_dim + 3) / 4 * 4; }

SPATTN_HD size_t select_smem_bytes(int64_t rows, int64_t row_stride, int64_t head_dim) {
  return static_cast<size_t>(q_tile_floats(rows, head_dim)) * sizeof(float) +
         static_cast<size_t>(rows * row_stride) * (sizeof(uint64_t) + sizeof(float));
}

// Logits of the tile's rows against key blocks [0, n_tile) of one kv head: a
// thread per key block reads its pooled key row once (16-byte loads when D
// allows) and dots it with every pooled q row of the tile (shared memory,
// read as a broadcast). Row rr keeps the entries below its own n_of[rr].
__device__ void score_tile(const SelectArgs& a, const float* q_tile, const float* pk, int64_t rows,
                           const int32_t* n_of, int64_t n_tile, uint64_t* keys) {
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
      if (rr < rows && c < n_of[rr]) reinterpret_cast<float*>(keys + rr * P)[c] = acc[rr] * scale;
  }
}

// Adds the softmax of one row's logits over [0, n) to its probs, weighted.
__device__ void add_softmax(const ThreadGroup& g, float* logits, float* probs, int64_t n, float weight,
                            float* scratch) {
  float local_max = -INFINITY;
  for (int64_t c = g.rank; c < n; c += g.size) local_max = fmaxf(local_max, logits[c]);
  const float row_max = group_reduce<true>(g, local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t c = g.rank; c < n; c += g.size) {
    const float e = __expf(logits[c] - row_max);
    logits[c] = e;
    local_sum += e;
  }
  const float inv_sum = weight / group_reduce<false>(g, local_sum, scratch);
  for (int64_t c = g.rank; c < n; c += g.size) probs[c] += logits[c] * inv_sum;
}

// Number of sorted positions s in [forced, n) whose preceding mass is < tau.
__device__ int64_t tau_taken(const ThreadGroup& g, double tau, const uint64_t* keys, int64_t forced, int64_t n,
                             float* fscratch, int32_t* iscratch) {
  const int64_t chunk = (n + g.size - 1) / g.size;
  const int64_t s0 = g.rank * chunk, s1 = s0 + chunk < n ? s0 + chunk : n;
  float own = 0.0f;
  for (int64_t s = s0; s < s1; ++s) own += key_prob(keys[s]);
  float mass = group_exclusive_scan(g, own, fscratch);
  int32_t count = 0;
  for (int64_t s = s0; s < s1; ++s) {
    if (s >= forced && (tau >= 1.0 || mass < static_cast<float>(tau))) ++count;
    mass += key_prob(keys[s]);
  }
  int32_t total = 0;
  group_exclusive_scan(g, count, iscratch, &total);
  return total;
}

// Orders, counts and stores one row (query block qb, n allowed blocks, its
// probabilities in probs): 64-bit sort keys in keys, a bitonic sort, the
// count rule, and the kept blocks compacted in ascending order into the
// row's slots.
__device__ void select_row(const SelectArgs& a, const ThreadGroup& g, int64_t row, int64_t qb, int64_t n,
                           uint64_t* keys, float* probs, float* fscratch, int32_t* iscratch) {
  const select_detail::SelectParams& p = a.p;
  const int64_t sort_len = next_pow2(n > 0 ? n : 1);
  g.sync();  // probs complete; the row's logits (aliasing keys) consumed
  for (int64_t c = g.rank; c < sort_len; c += g.size)
    keys[c] = c < n ? sort_key(select_detail::is_forced(p, qb, c), probs[c], c) : 0ull;
  g.sync();
  bitonic_sort_descending(g, keys, sort_len);

  const int64_t forced = select_detail::forced_count(p, qb, n);
  const int64_t wanted = p.use_tau ? forced + tau_taken(g, p.tau, keys, forced, n, fscratch, iscratch) : p.topk;
  const int64_t kept = select_detail::kept_count(p, wanted, forced, n);

  // Flags over block indices, then their ascending compaction into the slots.
  int32_t* flags = reinterpret_cast<int32_t*>(probs);
  for (int64_t c = g.rank; c < n; c += g.size) flags[c] = 0;
  g.sync();
  for (int64_t s = g.rank; s < kept; s += g.size) flags[key_index(keys[s])] = 1;
  g.sync();
  const int64_t chunk = (n + g.size - 1) / g.size;
  const int64_t c0 = g.rank * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
  int32_t own = 0;
  for (int64_t c = c0; c < c1; ++c) own += flags[c];
  int32_t at = group_exclusive_scan(g, own, iscratch);
  int32_t* out = a.slots + row * a.capacity;
  uint8_t* out_full = a.slot_full + row * a.capacity;
  for (int64_t c = c0; c < c1; ++c)
    if (flags[c]) {
      out_full[at] = select_detail::block_is_cut(p, qb, c) ? 0 : 1;
      out[at++] = static_cast<int32_t>(c);
    }
  if (g.rank == 0) a.counts[row] = static_cast<int32_t>(kept);
}

// One CTA per (batch, mask head, tile of R consecutive query blocks).
__global__ void __launch_bounds__(kSelectThreads) score_select_kernel(const SelectArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float fscratch[kMaxTileRows][kWarp];
  __shared__ int32_t iscratch[kMaxTileRows][kWarp];
  const select_detail::SelectParams& p = a.p;
  const int64_t nqb = p.num_q_blocks, R = a.tile_rows, P = a.row_stride, D = a.head_dim;
  const int64_t tiles = (nqb + R - 1) / R;
  const int64_t tile = blockIdx.x % tiles, m = (blockIdx.x / tiles) % a.mask_heads,
                b = blockIdx.x / (tiles * a.mask_heads);
  const int64_t qb0 = tile * R, rows = R < nqb - qb0 ? R : nqb - qb0;
  TileSmem s;
  s.q_tile = reinterpret_cast<float*>(smem);
  s.keys = reinterpret_cast<uint64_t*>(s.q_tile + q_tile_floats(R, D));
  s.probs = reinterpret_cast<float*>(s.keys + R * P);

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
  uint64_t* keys = s.keys + r * P;
  float* logits = reinterpret_cast<float*>(keys);
  for (int64_t c = g.rank; c < n; c += g.size) probs[c] = 0.0f;

  const int64_t group_heads = a.q_heads / a.kv_heads;
  const int64_t heads_per_row = a.per_query_head ? 1 : group_heads;
  for (int64_t t = 0; t < heads_per_row; ++t) {
    const int64_t h = a.per_query_head ? m : m * group_heads + t;
    const float* pq = a.pooled_q + ((b * a.q_heads + h) * nqb + qb0) * D;
    const float* pk = a.pooled_k + (b * a.kv_heads + h / group_heads) * p.num_k_blocks * D;
    __syncthreads();  // the previous head's logits and q tile are consumed
    for (int64_t i = threadIdx.x; i < rows * D; i += blockDim.x) s.q_tile[i] = pq[i];
    __syncthreads();
    score_tile(a, s.q_tile, pk, rows, n_of, n_tile, s.keys);
    __syncthreads();
    if (active)
      add_softmax(g, logits, probs, n, 1.0f / static_cast<float>(heads_per_row), fscratch[r]);
  }
  if (active) {
    const int64_t row = (b * a.mask_heads + m) * nqb + qb0 + r;
    select_row(a, g, row, qb0 + r, n, keys, probs, fscratch[r], iscratch[r]);
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
