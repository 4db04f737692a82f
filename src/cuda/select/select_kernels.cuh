// cuda/select/select_kernels.cuh - the device side of dynamic block selection
// (mean pooling), three launches with no host synchronisation:
//
//   pool_kernel          one CTA per (batch, head, block) of q and of k: the
//                        fp32 mean of the block's rows, per d (16-byte loads
//                        where the layout allows, pool_kernel_vec).
//   score_select_kernel  one CTA per (batch, mask head, query block) row:
//                        scores of the allowed key blocks (a warp per key
//                        block, lanes over d), a softmax per query head
//                        averaged into the row's probabilities, 64-bit sort
//                        keys (forced flag | probability bits | ~index) in a
//                        shared-memory bitonic sort (descending: forced
//                        first, then probability, ties to the lower index),
//                        the count rule (topk, or a block scan of the sorted
//                        mass against tau; then the budgets of
//                        select_rules.hpp), and the kept blocks compacted in
//                        ascending order into the row's fixed-capacity slots.
//                        The slots and their full / partial flags are what
//                        the fused select-then-attend path reads.
//   pack_kernel          one CTA per batch element: exclusive scan of the row
//                        counts into row_offsets, then the slots copied into
//                        contiguous kv_indices and kv_full (BlockMask arrays).
// Shared memory of score_select_kernel: keys (8 B) and probabilities (4 B)
// for the next power of two >= num_k_blocks, plus one pooled q vector.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "select/select_rules.hpp"

namespace spattn::cuda_detail::select_kernels {

constexpr int kPoolThreads = 128;
constexpr int kSelectThreads = 256;
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
  int64_t capacity = 0;       // slots per row
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

// ---- block-wide helpers (kSelectThreads threads) ----------------------------

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Reduces x over the CTA (sum or max); every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float x, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  x = kMax ? warp_max(x) : warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(x) : warp_sum(x);
}

// Exclusive scan over threads of one value each; returns this thread's prefix.
template <typename V>
__device__ V block_exclusive_scan(V x, V* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  V inclusive = x;
  for (int o = 1; o < kWarp; o <<= 1) {
    const V up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  __syncthreads();
  if (lane == kWarp - 1) scratch[warp] = inclusive;
  __syncthreads();
  V warp_prefix = 0;
  for (int w = 0; w < warp && w < warps; ++w) warp_prefix += scratch[w];
  return warp_prefix + inclusive - x;
}

// Sorts keys[0, n) descending; n is a power of two.
__device__ void bitonic_sort_descending(uint64_t* keys, int64_t n) {
  for (int64_t k = 2; k <= n; k <<= 1) {
    for (int64_t j = k >> 1; j > 0; j >>= 1) {
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
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
      __syncthreads();
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

// Adds the softmax of query head h over key blocks [0, n) to probs, weighted.
__device__ void add_head_probs(const SelectArgs& a, int64_t b, int64_t h, int64_t qb, int64_t n, float weight,
                               float* q_vec, float* logits, float* probs, float* scratch) {
  const int64_t D = a.head_dim, nqb = a.p.num_q_blocks, nkb = a.p.num_k_blocks;
  const int64_t kv_head = h / (a.q_heads / a.kv_heads);
  const float* pq = a.pooled_q + ((b * a.q_heads + h) * nqb + qb) * D;
  const float* pk = a.pooled_k + (b * a.kv_heads + kv_head) * nkb * D;
  __syncthreads();  // q_vec and logits are free
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) q_vec[d] = pq[d];
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const float scale = static_cast<float>(a.p.scale);
  for (int64_t c = warp; c < n; c += warps) {
    float partial = 0.0f;
    for (int64_t d = lane; d < D; d += kWarp) partial += q_vec[d] * pk[c * D + d];
    partial = warp_sum(partial);
    if (lane == 0) logits[c] = partial * scale;
  }
  __syncthreads();
  float local_max = -INFINITY;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) local_max = fmaxf(local_max, logits[c]);
  const float row_max = block_reduce<true>(local_max, scratch);
  float local_sum = 0.0f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float e = __expf(logits[c] - row_max);
    logits[c] = e;
    local_sum += e;
  }
  const float inv_sum = weight / block_reduce<false>(local_sum, scratch);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) probs[c] += logits[c] * inv_sum;
}

// Number of sorted positions s in [forced, n) whose preceding mass is < tau.
__device__ int64_t tau_taken(const SelectArgs& a, const uint64_t* keys, int64_t forced, int64_t n,
                             float* fscratch, int32_t* iscratch) {
  const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int64_t s0 = threadIdx.x * chunk, s1 = s0 + chunk < n ? s0 + chunk : n;
  float own = 0.0f;
  for (int64_t s = s0; s < s1; ++s) own += key_prob(keys[s]);
  float mass = block_exclusive_scan(own, fscratch);
  int32_t count = 0;
  for (int64_t s = s0; s < s1; ++s) {
    if (s >= forced && (a.p.tau >= 1.0 || mass < static_cast<float>(a.p.tau))) ++count;
    mass += key_prob(keys[s]);
  }
  const int32_t before = block_exclusive_scan(count, iscratch);
  __shared__ int32_t total;
  if (threadIdx.x == blockDim.x - 1) total = before + count;
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kSelectThreads) score_select_kernel(const SelectArgs a) {
  extern __shared__ uint64_t smem[];
  __shared__ float fscratch[kWarp];
  __shared__ int32_t iscratch[kWarp];
  const select_detail::SelectParams& p = a.p;
  const int64_t nqb = p.num_q_blocks;
  const int64_t row = blockIdx.x;  // (b, mask head, qb)
  const int64_t qb = row % nqb, m = (row / nqb) % a.mask_heads, b = row / (nqb * a.mask_heads);
  const int64_t n = select_detail::allowed_blocks(p, qb);
  const int64_t capacity_pow2 = next_pow2(p.num_k_blocks);
  uint64_t* keys = smem;                                          // capacity_pow2
  float* probs = reinterpret_cast<float*>(keys + capacity_pow2);  // capacity_pow2
  float* q_vec = probs + capacity_pow2;                           // head_dim
  float* logits = reinterpret_cast<float*>(keys);                 // aliases keys until they are built

  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) probs[c] = 0.0f;
  const int64_t group = a.q_heads / a.kv_heads;
  const int64_t heads_per_row = a.per_query_head ? 1 : group;
  for (int64_t t = 0; t < heads_per_row; ++t) {
    const int64_t h = a.per_query_head ? m : m * group + t;
    add_head_probs(a, b, h, qb, n, 1.0f / static_cast<float>(heads_per_row), q_vec, logits, probs, fscratch);
  }
  __syncthreads();

  const int64_t sort_len = next_pow2(n > 0 ? n : 1);
  for (int64_t c = threadIdx.x; c < sort_len; c += blockDim.x)
    keys[c] = c < n ? sort_key(select_detail::is_forced(p, qb, c), probs[c], c) : 0ull;
  __syncthreads();
  bitonic_sort_descending(keys, sort_len);

  const int64_t forced = select_detail::forced_count(p, qb, n);
  const int64_t wanted = p.use_tau ? forced + tau_taken(a, keys, forced, n, fscratch, iscratch) : p.topk;
  const int64_t kept = select_detail::kept_count(p, wanted, forced, n);

  // Flags over block indices, then their ascending compaction into the slots.
  int32_t* flags = reinterpret_cast<int32_t*>(probs);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) flags[c] = 0;
  __syncthreads();
  for (int64_t s = threadIdx.x; s < kept; s += blockDim.x) flags[key_index(keys[s])] = 1;
  __syncthreads();
  const int64_t chunk = (n + blockDim.x - 1) / blockDim.x;
  const int64_t c0 = threadIdx.x * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
  int32_t own = 0;
  for (int64_t c = c0; c < c1; ++c) own += flags[c];
  int32_t at = block_exclusive_scan(own, iscratch);
  int32_t* out = a.slots + row * a.capacity;
  uint8_t* out_full = a.slot_full + row * a.capacity;
  for (int64_t c = c0; c < c1; ++c)
    if (flags[c]) {
      out_full[at] = select_detail::block_is_cut(p, qb, c) ? 0 : 1;
      out[at++] = static_cast<int32_t>(c);
    }
  if (threadIdx.x == 0) a.counts[row] = static_cast<int32_t>(kept);
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
  int64_t at = block_exclusive_scan(own, scratch);
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
