// cuda/kvcache/kvcache_decode.cu - attention of few query rows over the kept
// key blocks of a KV cache (decoding, speculative tokens, short prefill
// chunks), and the merge of its splits.
//
// Decoding reads every kept key once and does little with it, so the kernel
// is built for memory bandwidth on the CUDA cores, not the tensor cores. A
// CTA (128 threads) takes rows_per_cta query rows of one kv head (its query
// heads and rows packed together: they share the keys) and one split of the
// kv head's kept blocks (kvcache_blocks.cu). It streams tiles of keys and
// values (16 KB each) into shared memory with cp.async, double-buffered,
// each key's page resolved through the page table once per tile (one thread
// per key) before the copies are issued. Every
// query row is held by a lane group of D / 8 lanes (8 dims a lane, fp32);
// the groups left over take every KL-th key of a tile for the same rows, so
// all 128 threads work even for one row. A lane group scores a key with
// fp32 FMAs and shuffles, tests it against the row's pattern only in blocks
// not kept whole, and folds it into its online softmax (base 2). At the end
// the groups of a row merge in shared memory, and the row is written: the
// output itself when there is one split, else a normalised partial O and
// its LSE for the combine kernel.
#include <algorithm>
#include <cmath>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/kvcache/kvcache_device.cuh"
#include "cuda/kvcache/kvcache_kernels.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

using kvcache::element;

constexpr int kThreads = 128;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct DecodeShape {
  static_assert(D == 32 || D == 64 || D == 128 || D == 256, "head dims 32, 64, 128, 256");
  static constexpr int kLanes = D / 8;                // lanes of one query row
  static constexpr int kGroups = kThreads / kLanes;   // lane groups of a CTA
  static constexpr int kTileKeys = 8192 / D;          // keys of a 16 KB tile
  static constexpr int kTileElems = kTileKeys * D;
  // Two stages of keys and values, then each stage's key positions, pages, page rows and partial flags.
  static constexpr int kSmemBytes = 4 * kTileElems * 2 + 2 * kTileKeys * (8 + 8 + 8 + 4);
};

// Writes row (b, h, i) of the result: `o` (the lane's 8 dims) and the LSE (lane 0).
template <typename T>
__device__ void store_row(const KvCacheParams& p, int64_t b, int64_t h, int64_t i, int64_t d, const float (&o)[8],
                          float lse, bool lane0) {
  if (p.out_f32) {
    float* out = element<float>(p.out, b, h, i, d);
#pragma unroll
    for (int n = 0; n < 8; ++n) out[n] = o[n];
  } else {
    T* out = element<T>(p.out, b, h, i, d);
#pragma unroll
    for (int n = 0; n < 8; ++n) out[n] = kvcache::from_float<T>(o[n]);
  }
  if (lane0 && p.lse.data) *element<float>(p.lse, b, h, i, 0) = lse;
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) decode_kernel(const KvCacheParams p) {
  using S = DecodeShape<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  T* const k_tiles = reinterpret_cast<T*>(smem);
  T* const v_tiles = k_tiles + 2 * S::kTileElems;
  // Per stage and key of a tile: its position (-1: none), physical page, row in the page, and
  // whether its block is kept only in part.
  int64_t* const key_pos = reinterpret_cast<int64_t*>(v_tiles + 2 * S::kTileElems);
  int64_t* const key_page = key_pos + 2 * S::kTileKeys;
  int64_t* const key_row = key_page + 2 * S::kTileKeys;
  int32_t* const key_partial = reinterpret_cast<int32_t*>(key_row + 2 * S::kTileKeys);

  const int64_t split = blockIdx.z, bg = blockIdx.x, b = bg / p.kv_heads, g = bg % p.kv_heads;
  const int64_t group = p.q_heads / p.kv_heads, rows = group * p.q_len;
  const int tid = threadIdx.x, lane = tid % S::kLanes, lane_group = tid / S::kLanes;
  const int rows_here = static_cast<int>(p.rows_per_cta), key_lanes = S::kGroups / rows_here;
  const int slot = lane_group / key_lanes, key_lane = lane_group % key_lanes;
  const int64_t row = blockIdx.y * p.rows_per_cta + slot;
  const bool active = slot < rows_here && row < rows;
  const int64_t h = g * group + (active ? row / p.q_len : 0), i = active ? row % p.q_len : 0;
  const int64_t d0 = lane * 8;

  const int32_t count = p.block_count[bg];
  const int64_t keys = count >= 0 ? p.cache_seqlens[b] + p.new_rows : 0;
  const int64_t position = keys - p.q_len + i;
  const int64_t first = count > 0 ? split * count / p.splits : 0;
  const int64_t last = count > 0 ? (split + 1) * count / p.splits : 0;
  const int64_t range_keys = (last - first) * p.block_keys;
  const int32_t* blocks = p.blocks + bg * p.max_blocks;
  const uint8_t* block_full = p.block_full + bg * p.max_blocks;
  const PatternExpr* expr =
      p.exprs == nullptr ? nullptr : (p.num_exprs == 1 ? p.exprs : p.exprs + h / (p.q_heads / p.num_exprs));

  float q[8] = {};
  if (active) {
    kvcache::to_floats<T>(
        *reinterpret_cast<const uint4*>(element<const T>(p.q, b, h, i, d0)), q);
#pragma unroll
    for (int n = 0; n < 8; ++n) q[n] *= p.scale_log2;
  }

  // Where keys [start, start + tile) of this split's stream lie, into stage
  // `stage`'s key arrays: one thread per key, so the divisions are paid once.
  auto locate_tile = [&](int64_t start, int stage) {
    for (int key = tid; key < S::kTileKeys; key += kThreads) {
      const int64_t t = start + key;
      int64_t j = -1, page = 0, page_row = 0;
      bool partial = false;
      if (t < range_keys) {
        const int64_t at_block = first + t / p.block_keys;
        const int64_t jj = static_cast<int64_t>(blocks[at_block]) * p.block_keys + t % p.block_keys;
        if (jj < keys) {
          j = jj;
          partial = block_full[at_block] == 0;
          page = kvcache::physical_page(p, b, jj);  // checked by the block-list kernel
          page_row = p.page_table ? jj % p.page_rows : jj;
        }
      }
      key_pos[stage * S::kTileKeys + key] = j;
      key_page[stage * S::kTileKeys + key] = page;
      key_row[stage * S::kTileKeys + key] = page_row;
      key_partial[stage * S::kTileKeys + key] = partial ? 1 : 0;
    }
  };
  // The located keys and values into stage `stage` (16 bytes a copy; zeros where there is no key).
  auto load_tile = [&](int stage) {
    for (int c = tid; c < S::kTileKeys * S::kLanes; c += kThreads) {
      const int key = c / S::kLanes, part = c % S::kLanes;
      const int at_key = stage * S::kTileKeys + key;
      const bool valid = key_pos[at_key] >= 0;
      const int64_t page = key_page[at_key], page_row = key_row[at_key];
      const int64_t elem = key * D + part * 8;
      cp_async_16(smem_address(k_tiles + stage * S::kTileElems + elem),
                  element<const T>(p.k_cache, page, g, page_row, part * 8), valid);
      cp_async_16(smem_address(v_tiles + stage * S::kTileElems + elem),
                  element<const T>(p.v_cache, page, g, page_row, part * 8), valid);
    }
  };

  float m = -INFINITY, l = 0.0f, o[8] = {};
  bool poisoned = count < 0;  // a bad sequence's rows come out NaN
  const int64_t tiles = (range_keys + S::kTileKeys - 1) / S::kTileKeys;
  if (tiles > 0) {
    locate_tile(0, 0);
    __syncthreads();
    load_tile(0);
    cp_async_commit();
  }
  for (int64_t t = 0; t < tiles; ++t) {
    const int stage = static_cast<int>(t & 1);
    if (t + 1 < tiles) {
      locate_tile((t + 1) * S::kTileKeys, stage ^ 1);
      __syncthreads();
      load_tile(stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* k_tile = k_tiles + stage * S::kTileElems;
    const T* v_tile = v_tiles + stage * S::kTileElems;
    for (int key0 = 0; key0 < S::kTileKeys; key0 += key_lanes) {
      const int key = key0 + key_lane;
      const bool mine = active && key < S::kTileKeys;
      float k[8];
      kvcache::to_floats<T>(*reinterpret_cast<const uint4*>(k_tile + (mine ? key : 0) * D + d0), k);
      float even = 0.0f, odd = 0.0f;  // two chains: half the latency of one
#pragma unroll
      for (int n = 0; n < 8; n += 2) {
        even = fmaf(q[n], k[n], even);
        odd = fmaf(q[n + 1], k[n + 1], odd);
      }
      float s = even + odd;
#pragma unroll
      for (int offset = S::kLanes / 2; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
      if (!mine) continue;
      const int64_t j = key_pos[stage * S::kTileKeys + key];
      if (j < 0) continue;
      if (key_partial[stage * S::kTileKeys + key] &&
          !(p.chosen ? j <= position : expr == nullptr || expr_allows(*expr, h, i, position, j)))
        continue;  // masked: never weighed
      if (s != s || s == INFINITY) {
        poisoned = true;
        continue;
      }
      if (s == -INFINITY) continue;
      float v[8];
      kvcache::to_floats<T>(*reinterpret_cast<const uint4*>(v_tile + key * D + d0), v);
      if (s > m) {
        const float alpha = fast_exp2(m - s);
        l = l * alpha + 1.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n) o[n] = fmaf(o[n], alpha, v[n]);
        m = s;
      } else {
        const float w = fast_exp2(s - m);
        l += w;
#pragma unroll
        for (int n = 0; n < 8; ++n) o[n] = fmaf(w, v[n], o[n]);
      }
    }
    __syncthreads();
  }

  // The lane groups of a row merge: each stores its state, the first of the row folds them.
  constexpr int kStride = D + 4;
  float* const merge = reinterpret_cast<float*>(smem);
  __syncthreads();
  if (slot < rows_here) {
    float* mine = merge + lane_group * kStride;
#pragma unroll
    for (int n = 0; n < 8; ++n) mine[d0 + n] = o[n];
    if (lane == 0) {
      mine[D] = m;
      mine[D + 1] = l;
      mine[D + 2] = poisoned ? 1.0f : 0.0f;
    }
  }
  __syncthreads();
  if (!active || key_lane != 0) return;
  float top = -INFINITY;
  bool nan = false;
  for (int k = 0; k < key_lanes; ++k) {
    const float* theirs = merge + (slot * key_lanes + k) * kStride;
    top = fmaxf(top, theirs[D]);
    nan |= theirs[D + 2] != 0.0f;
  }
  float sum = 0.0f, acc[8] = {};
  if (top != -INFINITY) {
    for (int k = 0; k < key_lanes; ++k) {
      const float* theirs = merge + (slot * key_lanes + k) * kStride;
      const float w = fast_exp2(theirs[D] - top);
      sum += w * theirs[D + 1];
#pragma unroll
      for (int n = 0; n < 8; ++n) acc[n] = fmaf(w, theirs[d0 + n], acc[n]);
    }
  }
  const bool empty = !nan && sum == 0.0f;
  const float lse = nan ? NAN : (empty ? -INFINITY : (top + log2f(sum)) * kLn2);
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n] = nan ? NAN : (empty ? 0.0f : acc[n] / sum);
  if (p.splits == 1) {
    store_row<T>(p, b, h, i, d0, acc, lse, lane == 0);
    return;
  }
  const int64_t part = (split * p.batch * p.kv_heads + bg) * rows + row;
#pragma unroll
  for (int n = 0; n < 8; ++n) p.part_o[part * p.head_dim + d0 + n] = acc[n];
  if (lane == 0) p.part_lse[part] = lse;
}

// One CTA per (sequence, kv head, row): the splits' partial results merged
// by their LSE (NaN if any is NaN; 0 and -inf if none has a key).
template <typename T>
__global__ void __launch_bounds__(kThreads) combine_kernel(const KvCacheParams p) {
  const int64_t rows = p.q_heads / p.kv_heads * p.q_len, stride = p.batch * p.kv_heads * rows;
  const int64_t index = blockIdx.x, bg = index / rows, row = index % rows;
  const int64_t b = bg / p.kv_heads, h = bg % p.kv_heads * (p.q_heads / p.kv_heads) + row / p.q_len;
  const int64_t i = row % p.q_len;
  float top = -INFINITY;
  bool nan = false;
  for (int64_t s = 0; s < p.splits; ++s) {
    const float x = p.part_lse[s * stride + index];
    nan |= x != x;
    top = fmaxf(top, x);
  }
  float sum = 0.0f;
  if (!nan && top != -INFINITY)
    for (int64_t s = 0; s < p.splits; ++s) sum += expf(p.part_lse[s * stride + index] - top);
  for (int64_t d = threadIdx.x; d < p.head_dim; d += kThreads) {
    float acc = 0.0f;
    if (!nan && top != -INFINITY)
      for (int64_t s = 0; s < p.splits; ++s)
        acc += expf(p.part_lse[s * stride + index] - top) * p.part_o[(s * stride + index) * p.head_dim + d];
    const float value = nan ? NAN : (top == -INFINITY ? 0.0f : acc / sum);
    if (p.out_f32)
      *element<float>(p.out, b, h, i, d) = value;
    else
      *element<T>(p.out, b, h, i, d) = kvcache::from_float<T>(value);
  }
  if (threadIdx.x == 0 && p.lse.data)
    *element<float>(p.lse, b, h, i, 0) = nan ? NAN : (top == -INFINITY ? -INFINITY : top + logf(sum));
}

template <typename T, int D>
void launch_decode(const KvCacheParams& p, cudaStream_t stream) {
  const auto kernel = decode_kernel<T, D>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), DecodeShape<D>::kSmemBytes, "KV-cache decode kernel");
  const dim3 grid(static_cast<unsigned>(p.batch * p.kv_heads), static_cast<unsigned>(p.row_tiles),
                  static_cast<unsigned>(p.splits));
  kernel<<<grid, kThreads, DecodeShape<D>::kSmemBytes, stream>>>(p);
  check_launch("KV-cache decode kernel");
}

}  // namespace

int64_t kvcache_tile_keys(int64_t head_dim) { return 8192 / head_dim; }

int64_t kvcache_max_rows_per_cta(int64_t head_dim) { return kThreads / (head_dim / 8); }

namespace {
// Decode CTAs one SM holds at head dim D (the same for both input types).
template <int D>
int ctas_per_sm() {
  const auto kernel = decode_kernel<__half, D>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), DecodeShape<D>::kSmemBytes, "KV-cache decode kernel");
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, DecodeShape<D>::kSmemBytes),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return std::max(per_sm, 1);
}
}  // namespace

int64_t kvcache_resident_ctas(int64_t head_dim) {
  int per_sm = 1;  // asked once per process and head dim
  switch (head_dim) {
    case 32: { static const int n = ctas_per_sm<32>(); per_sm = n; break; }
    case 64: { static const int n = ctas_per_sm<64>(); per_sm = n; break; }
    case 128: { static const int n = ctas_per_sm<128>(); per_sm = n; break; }
    default: { static const int n = ctas_per_sm<256>(); per_sm = n; break; }
  }
  return static_cast<int64_t>(per_sm) * current_device_info().sms;
}

template <typename T>
void launch_kvcache_decode(const KvCacheParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 32: return launch_decode<T, 32>(p, stream);
    case 64: return launch_decode<T, 64>(p, stream);
    case 128: return launch_decode<T, 128>(p, stream);
    case 256: return launch_decode<T, 256>(p, stream);
    default: fail("KV-cache decode kernel: head_dim must be 32, 64, 128 or 256, got ", p.head_dim);
  }
}

template <typename T>
void launch_kvcache_combine(const KvCacheParams& p, cudaStream_t stream) {
  const int64_t rows = p.batch * p.q_heads * p.q_len;
  combine_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(p);
  check_launch("KV-cache combine kernel");
}

template void launch_kvcache_decode<__nv_bfloat16>(const KvCacheParams&, cudaStream_t);
template void launch_kvcache_decode<__half>(const KvCacheParams&, cudaStream_t);
template void launch_kvcache_combine<__nv_bfloat16>(const KvCacheParams&, cudaStream_t);
template void launch_kvcache_combine<__half>(const KvCacheParams&, cudaStream_t);

}  // namespace spattn::cuda_detail
