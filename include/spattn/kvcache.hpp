// spattn/kvcache.hpp - attention over a KV cache, paged or contiguous, with new
// keys appended in place first (decoding, chunked prefill, speculative tokens).
//
// FlashAttention's convention (flash_attn_with_kvcache): sequence b holds
// cache_seqlens[b] keys in the cache; new keys k_new[b], v_new[b] (L_new rows,
// optional) are written at positions cache_seqlens[b] .. + L_new, then its Lq
// queries (the last Lq of its Lk = cache_seqlens[b] + L_new positions,
// bottom-right aligned as everywhere else) attend to its Lk keys. The cache
// lengths are not advanced here: the caller does that, as in FlashAttention.
//
// Paged caches: k_cache and v_cache are (num_pages, Hkv, page_size, D) views
// (any strides; a (num_pages, page_size, Hkv, D) buffer is the usual one)
// and page_table (batch x max_pages, row-major) gives the physical page of
// each of a sequence's logical pages; the entries of pages a call neither
// writes nor reads are not looked at (-1 for a freed page is fine), and a
// page it needs outside the cache is an error naming the entry. Without a
// page table the caches are
// contiguous, (batch, Hkv, Lk_max, D): one page of Lk_max keys per sequence.
//
// The mask: the pattern of `mask` (prefix stable, as for varlen batches:
// every pattern but BigBird and custom) at each sequence's own lengths, with
// the mask's query blocks and key blocks of one page; null means dense. A
// paged call reads only the pages the pattern keeps for the sequence's
// queries (a streaming or sliding-window decode never touches the middle
// pages, so a cache owner may free them); the CPU backend's decode path
// (few query rows per kv head) reads them in place, other calls on the host
// gather them into a scratch buffer of the sequence's length, the rest of
// which is never written or read. Backends: Reference and Cpu (host tensors),
// and CUDA (device tensors, fp16/bf16, head dims 32, 64, 128, 256; the cache
// lengths, page table and chosen pages in device memory, read there by the
// kernels, so a step can be captured in a CUDA graph; the query heads of a kv
// head share each key read; docs/backends.md).
#pragma once

#include <cstdint>

#include "spattn/attention.hpp"

namespace spattn {

struct KvCacheView {
  TensorView k_cache, v_cache;             // (num_pages, Hkv, page_size, D), or (batch, Hkv, Lk_max, D)
  const int32_t* page_table = nullptr;     // batch x max_pages; null: contiguous caches
  int64_t max_pages = 0;                   // a page table's row length
  const int32_t* cache_seqlens = nullptr;  // batch entries: the keys already in each sequence's cache
  // Optional key summaries of a paged cache, (num_pages, Hkv, 1, D) fp32 each:
  // the elementwise min and max of the keys each page holds. An append
  // updates the pages it writes (a page written from its first row starts
  // afresh); spattn.select_pages reads them (Quest).
  TensorView page_min, page_max;  // data null: none
  // Optional chosen pages (Quest decoding): batch x Hkv x pages_per_head
  // logical pages, -1 for an unused slot. Query head h then attends, causally
  // (bottom-right), to the keys of its kv head's pages and of the pages the
  // call's new keys land in, instead of following a mask (give one or the other).
  const int32_t* pages = nullptr;
  int64_t pages_per_head = 0;
};

// Throws spattn::Error, naming the argument and value, unless the tensors,
// the cache and the mask fit together; for host tensors it also reads the
// cache lengths (every sequence's keys within its pages, Lq <= its keys).
// The page table's entries are checked as they are used. On CUDA the
// kernels check the lengths and entries, and the call raises the same
// errors after them (outside a CUDA graph capture; inside one the rows of a
// bad sequence come out NaN).
void validate_attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                                     const TensorView* v_new, const TensorView& out, const BlockMask* mask,
                                     const TensorView* lse);

// q (batch, Hq, Lq, D); k_new, v_new (batch, Hkv, L_new, D) or both null;
// out (batch, Hq, Lq, D); lse (batch, Hq, Lq) fp32 or null.
void attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                            const TensorView* v_new, const TensorView& out, const BlockMask* mask = nullptr,
                            const AttentionOptions& options = {}, const TensorView* lse = nullptr);

}  // namespace spattn
