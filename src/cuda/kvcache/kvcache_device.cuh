// cuda/kvcache/kvcache_device.cuh - device helpers the KV-cache kernels
// share: a sequence's lengths read on the device, the physical page of a
// logical one, the status report, 16-byte rows of fp16/bf16 as floats, and
// an element of a kernel argument.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/kvcache/kvcache_params.hpp"

namespace spattn::cuda_detail::kvcache {

// Records the first error of a call (later ones are dropped).
__device__ inline void report(KvCacheStatus* status, int32_t code, int64_t a, int64_t b, int64_t c, int64_t d) {
  if (atomicCAS(&status->code, 0, code) != 0) return;
  status->a = a;
  status->b = b;
  status->c = c;
  status->d = d;
}

// Sequence b's keys after the append; -1 when its length does not fit its cache.
__device__ inline int64_t keys_after_append(const KvCacheParams& p, int64_t b) {
  const int64_t cached = p.cache_seqlens[b], keys = cached + p.new_rows;
  return cached < 0 || keys > p.capacity ? -1 : keys;
}

// The physical page holding key j of sequence b (the sequence itself for a
// contiguous cache); -1 for an entry outside the cache.
__device__ inline int64_t physical_page(const KvCacheParams& p, int64_t b, int64_t j) {
  if (p.page_table == nullptr) return b;
  const int64_t page = p.page_table[b * p.max_pages + j / p.page_rows];
  return page >= 0 && page < p.num_pages ? page : -1;
}

// Eight fp16 or bf16 values (16 bytes) as floats.
template <typename T>
__device__ inline void to_floats(const uint4& raw, float (&f)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    float2 pair;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      pair = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[n]));
    } else {
      pair = __half22float2(*reinterpret_cast<const __half2*>(&words[n]));
    }
    f[2 * n] = pair.x;
    f[2 * n + 1] = pair.y;
  }
}

template <typename T>
__device__ inline float to_float(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

template <typename T>
__device__ inline T from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16(x);
  } else {
    return __float2half(x);
  }
}

// Element (a, b, c, d) of `t` as a T.
template <typename T>
__device__ inline T* element(const TensorArg& t, int64_t a, int64_t b, int64_t c, int64_t d) {
  return static_cast<T*>(t.data) + t.row_offset(a, b, c) + d;
}

}  // namespace spattn::cuda_detail::kvcache
