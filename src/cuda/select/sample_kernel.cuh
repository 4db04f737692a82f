// cuda/select/sample_kernel.cuh - block scores from antidiagonal samples on the
// device (SelectConfig::stride = S >= 1, after XAttention), the GPU
// counterpart of select_detail::antidiagonal_probs's scores.
//
// One CTA per (batch, query head, query block) holds the block's q rows in
// shared memory (fp32, rows padded by one float against bank conflicts) and
// walks the row's allowed key blocks, loading each into shared memory: the
// sampled pairs are row r, key u of the block with (r + u) % S == S - 1 (and,
// causally, key position <= query position), one pair per thread at a time,
// each thread keeping a running max and sum of exp; the CTA combines them into
// score = max + log(sum / pairs), or -inf when no pair is sampled. Cost: a
// 1/S share of dense attention's q.k products on CUDA cores, and every key
// block is read once per query block (from L2).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/select/select_kernels.cuh"

namespace spattn::cuda_detail::select_kernels {

constexpr int kSampleThreads = 256;

struct SampleArgs {
  select_detail::SelectParams p;
  const void* q = nullptr;  // (B, Hq, Lq, D), element strides below
  const void* k = nullptr;  // (B, Hkv, Lk, D)
  int64_t q_stride[4] = {0, 0, 0, 0}, k_stride[4] = {0, 0, 0, 0};
  int64_t batch = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  float* scores = nullptr;  // (B, Hq, nqb, nkb); entries past a row's allowed blocks are not written
};

// Shared memory of sample_scores_kernel: q and k blocks, D + 1 floats a row.
SPATTN_HD size_t sample_smem_bytes(int64_t block_q, int64_t block_k, int64_t head_dim) {
  return static_cast<size_t>((block_q + block_k) * (head_dim + 1)) * sizeof(float);
}

// Running (max, sum of exp(x - max)) pairs, combined.
struct ExpSum {
  float max, sum;
};
__device__ __forceinline__ ExpSum combine(ExpSum a, ExpSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return ExpSum{m, 0.0f};
  return ExpSum{m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

template <typename T>
__device__ void load_block_rows(const T* base, int64_t stride_l, int64_t stride_d, int64_t rows, int64_t D,
                                float* dst) {
  for (int64_t e = threadIdx.x; e < rows * D; e += blockDim.x) {
    const int64_t r = e / D, d = e % D;
    dst[r * (D + 1) + d] = to_float(base[r * stride_l + d * stride_d]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kSampleThreads) sample_scores_kernel(const SampleArgs a) {
  extern __shared__ float sample_smem[];
  __shared__ ExpSum warp_part[kSampleThreads / kWarp];
  __shared__ int32_t warp_count[kSampleThreads / kWarp];
  const select_detail::SelectParams& p = a.p;
  const int64_t nqb = p.num_q_blocks, nkb = p.num_k_blocks, D = a.head_dim, S = p.stride, ld = D + 1;
  const int64_t qb = blockIdx.x % nqb, h = (blockIdx.x / nqb) % a.q_heads, b = blockIdx.x / (nqb * a.q_heads);
  const int64_t kvh = h / (a.q_heads / a.kv_heads), offset = p.k_len - p.q_len;
  const int64_t i0 = qb * p.block_q, rows = (i0 + p.block_q < p.q_len ? i0 + p.block_q : p.q_len) - i0;
  float* qs = sample_smem;
  float* ks = sample_smem + p.block_q * ld;
  const T* qg = static_cast<const T*>(a.q) + b * a.q_stride[0] + h * a.q_stride[1] + i0 * a.q_stride[2];
  const T* kg = static_cast<const T*>(a.k) + b * a.k_stride[0] + kvh * a.k_stride[1];
  load_block_rows(qg, a.q_stride[2], a.q_stride[3], rows, D, qs);
  const float scale = static_cast<float>(p.scale);
  const int64_t n = select_detail::allowed_blocks(p, qb), per_row = (p.block_k + S - 1) / S;
  float* out = a.scores + ((b * a.q_heads + h) * nqb + qb) * nkb;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t j0 = c * p.block_k, keys = (j0 + p.block_k < p.k_len ? j0 + p.block_k : p.k_len) - j0;
    __syncthreads();  // the previous key block is consumed
    load_block_rows(kg + j0 * a.k_stride[2], a.k_stride[2], a.k_stride[3], keys, D, ks);
    __syncthreads();
    ExpSum acc{-INFINITY, 0.0f};
    int32_t count = 0;
    for (int64_t e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
      // Consecutive threads take consecutive rows: distinct banks for q, few keys shared as broadcasts.
      const int64_t r = e % rows, u = (S - 1 - r % S) + (e / rows) * S;
      if (u >= keys || (p.causal && j0 + u > i0 + r + offset)) continue;
      const float* qr = qs + r * ld;
      const float* kr = ks + u * ld;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot = fmaf(qr[d], kr[d], dot);
      acc = combine(acc, ExpSum{dot * scale, 1.0f});
      ++count;
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const ExpSum other{__shfl_xor_sync(0xffffffffu, acc.max, o), __shfl_xor_sync(0xffffffffu, acc.sum, o)};
      acc = combine(acc, other);
      count += __shfl_xor_sync(0xffffffffu, count, o);
    }
    if (lane == 0) {
      warp_part[warp] = acc;
      warp_count[warp] = count;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      ExpSum total{-INFINITY, 0.0f};
      int32_t pairs = 0;
      for (int w = 0; w < kSampleThreads / kWarp; ++w) {
        total = combine(total, warp_part[w]);
        pairs += warp_count[w];
      }
      out[c] = pairs == 0 ? -INFINITY : total.max + logf(total.sum / static_cast<float>(pairs));
    }
  }
}

}  // namespace spattn::cuda_detail::select_kernels
