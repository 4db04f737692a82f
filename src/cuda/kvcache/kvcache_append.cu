// cuda/kvcache/kvcache_append.cu - the new keys and values of a KV-cache call
// written into their pages at each sequence's length (read on the device),
// and the page summaries (elementwise key min and max) updated with them.
#include "cuda/common/cuda_check.hpp"
#include "cuda/kvcache/kvcache_device.cuh"
#include "cuda/kvcache/kvcache_kernels.hpp"

namespace spattn::cuda_detail {
namespace {

using kvcache::element;
using kvcache::keys_after_append;
using kvcache::physical_page;

constexpr int kThreads = 128;

// One thread per 16 bytes of a new row of one kv head, keys and values.
template <typename T>
__global__ void __launch_bounds__(kThreads) append_kernel(const KvCacheParams p) {
  const int64_t b = blockIdx.y, chunks = p.head_dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= p.new_rows * p.kv_heads * chunks) return;
  const int64_t r = idx / (p.kv_heads * chunks), h = idx / chunks % p.kv_heads, d = idx % chunks * 8;
  if (keys_after_append(p, b) < 0) return;  // the block-list kernel reports it
  const int64_t j = p.cache_seqlens[b] + r, page = physical_page(p, b, j);
  if (page < 0) {
    kvcache::report(p.status, kBadPageEntry, b, j / p.page_rows, p.page_table[b * p.max_pages + j / p.page_rows],
                    p.num_pages);
    return;
  }
  const int64_t row = p.page_table ? j % p.page_rows : j;
  *reinterpret_cast<uint4*>(element<T>(p.k_cache, page, h, row, d)) =
      *reinterpret_cast<const uint4*>(element<const T>(p.k_new, b, h, r, d));
  *reinterpret_cast<uint4*>(element<T>(p.v_cache, page, h, row, d)) =
      *reinterpret_cast<const uint4*>(element<const T>(p.v_new, b, h, r, d));
}

// One thread per (kv head, dim) of a sequence, walking its new rows in order:
// a page written from its first row starts afresh, others fold into the
// stored min and max.
template <typename T>
__global__ void __launch_bounds__(kThreads) summarise_kernel(const KvCacheParams p) {
  const int64_t b = blockIdx.y, idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= p.kv_heads * p.head_dim || keys_after_append(p, b) < 0) return;
  const int64_t h = idx / p.head_dim, d = idx % p.head_dim;
  int64_t page = -1;
  float low = 0.0f, high = 0.0f;
  for (int64_t r = 0; r < p.new_rows; ++r) {
    const int64_t j = p.cache_seqlens[b] + r, now = physical_page(p, b, j);
    if (now < 0) return;  // reported by the append
    if (now != page) {
      if (page >= 0) {
        *element<float>(p.page_min, page, h, 0, d) = low;
        *element<float>(p.page_max, page, h, 0, d) = high;
      }
      page = now;
      const bool fresh = j % p.page_rows == 0;
      low = fresh ? INFINITY : *element<float>(p.page_min, page, h, 0, d);
      high = fresh ? -INFINITY : *element<float>(p.page_max, page, h, 0, d);
    }
    const float x = kvcache::to_float(*element<const T>(p.k_new, b, h, r, d));
    low = fminf(low, x);
    high = fmaxf(high, x);
  }
  if (page >= 0) {
    *element<float>(p.page_min, page, h, 0, d) = low;
    *element<float>(p.page_max, page, h, 0, d) = high;
  }
}

}  // namespace

template <typename T>
void launch_kvcache_append(const KvCacheParams& p, cudaStream_t stream) {
  if (p.new_rows == 0 || p.batch == 0) return;
  const int64_t cells = p.new_rows * p.kv_heads * (p.head_dim / 8);
  append_kernel<T><<<dim3(static_cast<unsigned>((cells + kThreads - 1) / kThreads), static_cast<unsigned>(p.batch)),
                     kThreads, 0, stream>>>(p);
  check_launch("KV-cache append kernel");
  if (p.page_min.data == nullptr) return;
  const int64_t lanes = p.kv_heads * p.head_dim;
  summarise_kernel<T><<<dim3(static_cast<unsigned>((lanes + kThreads - 1) / kThreads),
                             static_cast<unsigned>(p.batch)),
                        kThreads, 0, stream>>>(p);
  check_launch("KV-cache page summary kernel");
}

template void launch_kvcache_append<__nv_bfloat16>(const KvCacheParams&, cudaStream_t);
template void launch_kvcache_append<__half>(const KvCacheParams&, cudaStream_t);

}  // namespace spattn::cuda_detail
