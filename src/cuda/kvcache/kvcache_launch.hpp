// cuda/kvcache/kvcache_launch.hpp - the CUDA backend's attention over a KV
// cache (spattn/kvcache.hpp): the call's kernels queued on one stream with
// the lengths, page table and chosen pages read on the device, so a decode
// step can be captured in a CUDA graph.
#pragma once

#include <cuda_runtime_api.h>

#include "spattn/block_mask.hpp"
#include "spattn/kvcache.hpp"

namespace spattn::cuda_detail {

// Arguments already checked against each other on the host (shapes, dtypes;
// attention_kvcache.cpp); the per-sequence lengths and page-table entries
// are checked by the kernels. Outside a graph capture the call then waits
// for the stream and raises spattn::Error naming the first bad length or
// entry; inside one nothing waits, and the rows of a bad sequence are NaN.
void cuda_attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                                 const TensorView* v_new, const TensorView& out, const BlockMask* mask, double scale,
                                 const TensorView* lse, cudaStream_t stream);

}  // namespace spattn::cuda_detail
