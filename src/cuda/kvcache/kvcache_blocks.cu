// cuda/kvcache/kvcache_blocks.cu - the kept key blocks of every (sequence, kv
// head) of a KV-cache call, made on the device from the lengths it reads
// there: one CTA per pair walks the sequence's blocks in chunks, decides each
// (kept? kept whole by every query row of the kv head?) and compacts the kept
// ones in order with a block-wide scan. With a pattern the decision is the
// exact block classification the mask builders use (pattern/block_classify.hpp)
// of the rectangle (the call's query rows, the block's keys) for each query
// head of the kv head; with chosen pages it is membership plus the pages the
// new keys land in, whole when all their keys precede the first query.
// Checks each sequence's lengths and the page-table entries of its kept
// blocks; a bad sequence gets count -1 and a status report.
#include <cub/block/block_scan.cuh>

#include "cuda/common/cuda_check.hpp"
#include "cuda/kvcache/kvcache_device.cuh"
#include "cuda/kvcache/kvcache_kernels.hpp"
#include "pattern/block_classify.hpp"

namespace spattn::cuda_detail {
namespace {

constexpr int kThreads = 256;

// Whether every query row of kv head g keeps keys [j0, j1] whole (full) and
// whether some row keeps some of them (kept).
__device__ void classify(const KvCacheParams& p, int64_t g, int64_t first_position, int64_t j0, int64_t j1,
                         bool& kept, bool& full) {
  if (p.exprs == nullptr) {
    kept = full = true;
    return;
  }
  const int64_t group = p.q_heads / p.kv_heads;
  kept = false;
  full = true;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const PatternExpr& e = p.num_exprs == 1 ? *p.exprs : p.exprs[h / (p.q_heads / p.num_exprs)];
    const BlockClass c = expr_classify_block_exact(e, h, 0, p.q_len - 1, first_position, j0, j1);
    kept |= c != BlockClass::Empty;
    full &= c == BlockClass::Full;
  }
}

__global__ void __launch_bounds__(kThreads) block_list_kernel(const KvCacheParams p) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int bad;
  const int64_t bg = blockIdx.x, b = bg / p.kv_heads, g = bg % p.kv_heads;
  const int tid = threadIdx.x;
  const int64_t keys = kvcache::keys_after_append(p, b);
  if (tid == 0) {
    bad = 0;
    if (keys < 0) {
      kvcache::report(p.status, kBadLength, b, p.cache_seqlens[b], p.cache_seqlens[b] + p.new_rows, p.capacity);
      bad = 1;
    } else if (keys < p.q_len) {
      kvcache::report(p.status, kTooFewKeys, b, keys, p.q_len, 0);
      bad = 1;
    }
  }
  __syncthreads();
  if (bad || p.q_len == 0) {
    if (tid == 0) p.block_count[bg] = bad ? -1 : 0;
    return;
  }
  const int64_t num_blocks = (keys + p.block_keys - 1) / p.block_keys, first_position = keys - p.q_len;
  int32_t* blocks = p.blocks + bg * p.max_blocks;
  uint8_t* block_full = p.block_full + bg * p.max_blocks;
  if (p.chosen) {  // mark the chosen pages in `blocks` first (compaction below only writes what it has read)
    for (int64_t n = tid; n < num_blocks; n += kThreads) blocks[n] = 0;
    __syncthreads();
    const int32_t* chosen = p.chosen + bg * p.pages_per_head;
    for (int64_t slot = tid; slot < p.pages_per_head; slot += kThreads) {
      const int64_t page = chosen[slot];
      if (page == -1) continue;
      if (page < 0 || page >= num_blocks) {
        kvcache::report(p.status, kBadChosenPage, b, g, slot, page);
        bad = 1;
        continue;
      }
      blocks[page] = 1;
    }
    __syncthreads();
    if (bad) {
      if (tid == 0) p.block_count[bg] = -1;
      return;
    }
  }
  const int64_t first_new_block = p.new_rows > 0 ? p.cache_seqlens[b] / p.block_keys : num_blocks;
  int64_t total = 0;
  for (int64_t base = 0; base < num_blocks; base += kThreads) {
    const int64_t n = base + tid;
    bool kept = false, full = false;
    if (n < num_blocks) {
      const int64_t j0 = n * p.block_keys, j1 = min(keys, j0 + p.block_keys) - 1;
      if (p.chosen) {
        kept = blocks[n] != 0 || n >= first_new_block;
        full = j1 <= first_position;
      } else {
        classify(p, g, first_position, j0, j1, kept, full);
      }
      if (kept && p.page_table) {
        const int64_t entry = p.page_table[b * p.max_pages + n];
        if (entry < 0 || entry >= p.num_pages) {
          kvcache::report(p.status, kBadPageEntry, b, n, entry, p.num_pages);
          bad = 1;
        }
      }
    }
    int rank = 0, chunk_total = 0;
    Scan(scan).ExclusiveSum(kept ? 1 : 0, rank, chunk_total);
    __syncthreads();  // every read of this chunk's marks is done before the writes
    if (kept) {
      blocks[total + rank] = static_cast<int32_t>(n);
      block_full[total + rank] = full ? 1 : 0;
    }
    total += chunk_total;
    __syncthreads();
  }
  if (tid == 0) p.block_count[bg] = bad ? -1 : static_cast<int32_t>(total);
}

}  // namespace

void launch_kvcache_block_lists(const KvCacheParams& p, cudaStream_t stream) {
  block_list_kernel<<<static_cast<unsigned>(p.batch * p.kv_heads), kThreads, 0, stream>>>(p);
  check_launch("KV-cache block-list kernel");
}

}  // namespace spattn::cuda_detail
