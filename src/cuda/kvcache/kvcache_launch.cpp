// cuda/kvcache/kvcache_launch.cpp - a KV-cache call on the CUDA backend: its
// layout checks, kernel arguments, the split of each kv head's kept blocks
// (enough CTAs to fill the device at the cache's capacity), the call's
// stream-ordered scratch, the kernels of kvcache_kernels.hpp, and the status
// read back outside graph capture.
#include "cuda/kvcache/kvcache_launch.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/common/tensor_layout.hpp"
#include "cuda/kvcache/kvcache_kernels.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "pattern/terms/term_math.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr const char* kWho = "attention_with_kvcache (CUDA)";
constexpr int64_t kMaxSplits = 128;
constexpr int64_t kMaxGridY = 65535;
// Scratch above which a call checks the device's free memory first (cudaMemGetInfo costs time).
constexpr int64_t kCheckedScratchBytes = int64_t{256} << 20;

void require_device(const void* p, const char* name) {
  require(p == nullptr || cuda_is_device_pointer(p), kWho, ": ", name, " must be in device memory, like q");
}

// Splits of each (sequence, kv head, row tile) along its kept blocks: the
// count whose waves of CTAs finish soonest, time ~ waves / splits (a split's
// work shrinks as they grow), the smallest within 2% of the best; no more
// than the blocks the cache can hold, each split with at least two tiles of
// keys at the cache's capacity.
int64_t choose_splits(const KvCacheParams& p) {
  const int64_t units = std::max<int64_t>(1, p.batch * p.kv_heads * p.row_tiles);
  const int64_t wave = kvcache_resident_ctas(p.head_dim);
  const int64_t by_keys = std::max<int64_t>(1, p.capacity / (2 * kvcache_tile_keys(p.head_dim)));
  const int64_t most = std::clamp<int64_t>(std::min(by_keys, p.max_blocks), 1, kMaxSplits);
  const auto time = [&](int64_t splits) { return static_cast<double>(pattern_math::ceil_div(units * splits, wave)) / splits; };
  double best = time(1);
  for (int64_t splits = 2; splits <= most; ++splits) best = std::min(best, time(splits));
  for (int64_t splits = 1;; ++splits)
    if (time(splits) <= best * 1.02) return splits;
}

// The status the kernels left, as the error they describe.
void raise_status(const KvCacheStatus& s) {
  switch (s.code) {
    case kNoError: return;
    case kBadLength:
      if (s.b < 0) fail("cache_seqlens[", s.a, "] must be >= 0, got ", s.b);
      fail("sequence ", s.a, " needs ", s.c, " keys (cache_seqlens[", s.a, "]=", s.b, " plus the new ones) but its "
           "cache holds ", s.d);
    case kTooFewKeys:
      fail("sequence ", s.a, " has ", s.c, " queries but ", s.b, " keys; the queries are its last positions, so "
           "Lq <= cache_seqlens + L_new");
    case kBadPageEntry:
      fail("page_table[", s.a, "][", s.b, "]=", s.c, " is not a page of the cache (num_pages ", s.d, "), and "
           "sequence ", s.a, " reads or writes that page");
    case kBadChosenPage:
      fail("pages[", s.a, "][", s.b, "][", s.c, "]=", s.d, " is not a page of sequence ", s.a, " (-1 marks an "
           "unused slot)");
    default: fail(kWho, ": unknown status ", s.code);
  }
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

template <typename T>
void launch_all(const KvCacheParams& p, cudaStream_t stream) {
  launch_kvcache_append<T>(p, stream);
  launch_kvcache_block_lists(p, stream);
  if (p.q_len == 0 || p.q_heads == 0) return;
  launch_kvcache_decode<T>(p, stream);
  if (p.splits > 1) launch_kvcache_combine<T>(p, stream);
}

}  // namespace

void cuda_attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                                 const TensorView* v_new, const TensorView& out, const BlockMask* mask, double scale,
                                 const TensorView* lse, cudaStream_t stream) {
  require(q.dtype == DType::F16 || q.dtype == DType::BF16, kWho, ": q dtype must be fp16 or bf16, got ",
          dtype_name(q.dtype));
  require(out.dtype == q.dtype || out.dtype == DType::F32, kWho, ": out dtype must be ", dtype_name(q.dtype),
          " or fp32, got ", dtype_name(out.dtype));
  const int64_t D = q.head_dim();
  require(D == 32 || D == 64 || D == 128 || D == 256, kWho, ": head_dim must be 32, 64, 128 or 256, got ", D);
  require(std::isfinite(scale) && scale > 0, kWho, ": scale must be finite and > 0, got ", scale);
  if (q.batch() == 0) return;
  check_kernel_layout(q, kWho, "q", 8);
  check_kernel_layout(cache.k_cache, kWho, "k_cache", 8);
  check_kernel_layout(cache.v_cache, kWho, "v_cache", 8);
  if (k_new) {
    check_kernel_layout(*k_new, kWho, "k", 8);
    check_kernel_layout(*v_new, kWho, "v", 8);
  }
  require_device(cache.cache_seqlens, "cache_seqlens");
  require_device(cache.page_table, "page_table");
  require_device(cache.pages, "pages");
  require_device(cache.page_min.data, "page_min");
  require_device(cache.page_max.data, "page_max");
  require_device(out.data, "out");
  if (lse) require_device(lse->data, "lse");
  require(q.batch() <= kMaxGridY, kWho, ": batch must be at most ", kMaxGridY, ", got ", q.batch());

  KvCacheParams p;
  p.q = tensor_arg(q);
  p.out = tensor_arg(out);
  p.out_f32 = out.dtype == DType::F32;
  if (lse) p.lse = tensor_arg(*lse);
  p.k_cache = tensor_arg(cache.k_cache);
  p.v_cache = tensor_arg(cache.v_cache);
  p.num_pages = cache.k_cache.batch();
  p.page_table = cache.page_table;
  p.max_pages = cache.max_pages;
  p.page_rows = cache.k_cache.seq_len();
  p.capacity = cache.page_table ? cache.max_pages * p.page_rows : p.page_rows;
  p.cache_seqlens = cache.cache_seqlens;
  if (k_new) {
    p.k_new = tensor_arg(*k_new);
    p.v_new = tensor_arg(*v_new);
    p.new_rows = k_new->seq_len();
  }
  if (cache.page_min.data) {
    p.page_min = tensor_arg(cache.page_min);
    p.page_max = tensor_arg(cache.page_max);
  }
  p.batch = q.batch();
  p.q_heads = q.heads();
  p.kv_heads = cache.k_cache.heads();
  p.q_len = q.seq_len();
  p.head_dim = D;
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  std::shared_ptr<const DeviceMaskCopy> device_mask;
  if (mask) {
    device_mask = shared_device_copy(*mask, stream);
    p.exprs = device_mask->view().exprs;
    p.num_exprs = device_mask->view().num_exprs;
  }
  p.chosen = cache.pages;
  p.pages_per_head = cache.pages_per_head;
  p.block_keys = cache.page_table ? p.page_rows : kContiguousBlockKeys;
  p.max_blocks = std::max<int64_t>(1, pattern_math::ceil_div(p.capacity, p.block_keys));

  const int64_t rows = (p.kv_heads > 0 ? p.q_heads / p.kv_heads : 0) * p.q_len;
  p.rows_per_cta = std::clamp<int64_t>(rows, 1, kvcache_max_rows_per_cta(D));
  p.row_tiles = std::max<int64_t>(1, pattern_math::ceil_div(rows, p.rows_per_cta));
  require(p.row_tiles <= kMaxGridY, kWho, ": ", rows, " query rows per kv head (query heads per kv head times Lq) "
          "are more than one call takes (", kMaxGridY * p.rows_per_cta, "); split the chunk");
  p.splits = choose_splits(p);

  const int64_t pairs = p.batch * p.kv_heads;
  const size_t status_bytes = scratch_aligned(sizeof(KvCacheStatus));
  const size_t blocks_bytes = scratch_aligned(bytes_for(bytes_for(pairs, p.max_blocks), 4));
  const size_t full_bytes = scratch_aligned(bytes_for(pairs, p.max_blocks)), count_bytes = scratch_aligned(bytes_for(pairs, 4));
  const int64_t partial_rows = p.splits > 1 ? bytes_for(bytes_for(p.splits, pairs), rows) : 0;
  const size_t part_o_bytes = scratch_aligned(bytes_for(bytes_for(partial_rows, D), 4));
  const size_t part_lse_bytes = scratch_aligned(bytes_for(partial_rows, 4));
  const MemoryEstimate estimate = MemoryEstimate(kWho)
                                      .add("the kept-block lists", static_cast<int64_t>(blocks_bytes + full_bytes))
                                      .add("the splits' partial results", static_cast<int64_t>(part_o_bytes));
  // A small request that does not fit fails in the pool's allocation, with its own error.
  if (estimate.total() > kCheckedScratchBytes) cuda_check_memory(estimate);
  ScopedScratch scratch(status_bytes + blocks_bytes + full_bytes + count_bytes + part_o_bytes + part_lse_bytes, stream);
  char* at = static_cast<char*>(scratch.get());
  p.status = reinterpret_cast<KvCacheStatus*>(at);
  p.blocks = reinterpret_cast<int32_t*>(at += status_bytes);
  p.block_full = reinterpret_cast<uint8_t*>(at += blocks_bytes);
  p.block_count = reinterpret_cast<int32_t*>(at += full_bytes);
  p.part_o = partial_rows ? reinterpret_cast<float*>(at += count_bytes) : nullptr;
  p.part_lse = partial_rows ? reinterpret_cast<float*>(at + part_o_bytes) : nullptr;
  check_cuda(cudaMemsetAsync(p.status, 0, sizeof(KvCacheStatus), stream), "cudaMemsetAsync of the status");

  if (q.dtype == DType::BF16)
    launch_all<__nv_bfloat16>(p, stream);
  else
    launch_all<__half>(p, stream);
  if (capturing(stream)) return;
  KvCacheStatus status;
  check_cuda(cudaMemcpyAsync(&status, p.status, sizeof(status), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync of the status");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize for the status");
  raise_status(status);
}

}  // namespace spattn::cuda_detail
