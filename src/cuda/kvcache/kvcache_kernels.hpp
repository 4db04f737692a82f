// cuda/kvcache/kvcache_kernels.hpp - the launches of a KV-cache call's
// kernels, in the order kvcache_launch.cpp queues them on one stream:
// append (new rows into their pages, page summaries), block lists (the kept
// key blocks of every sequence and kv head, lengths and page entries checked),
// decode (each split of each kv head's rows over its share of the kept
// blocks), combine (the splits merged by LSE; only when there are several).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/kvcache/kvcache_params.hpp"

namespace spattn::cuda_detail {

// T: __nv_bfloat16 or __half.
template <typename T>
void launch_kvcache_append(const KvCacheParams& p, cudaStream_t stream);

void launch_kvcache_block_lists(const KvCacheParams& p, cudaStream_t stream);

// Keys per tile of the decode kernel at head dim `head_dim` (32, 64, 128 or 256).
int64_t kvcache_tile_keys(int64_t head_dim);
// Query rows of one kv head a decode CTA can take at once.
int64_t kvcache_max_rows_per_cta(int64_t head_dim);
// Decode CTAs the device holds at once (one wave).
int64_t kvcache_resident_ctas(int64_t head_dim);

template <typename T>
void launch_kvcache_decode(const KvCacheParams& p, cudaStream_t stream);

template <typename T>
void launch_kvcache_combine(const KvCacheParams& p, cudaStream_t stream);

}  // namespace spattn::cuda_detail
