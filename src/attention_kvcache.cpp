// attention_kvcache.cpp - attention over a KV cache on the host backends
// (spattn/kvcache.hpp): validation, the new keys written into their pages,
// then each sequence on its own: the mask of its lengths (key blocks of one
// page), and attention() on the cache read in place (contiguous caches) or
// on the pages that mask keeps gathered into scratch (paged caches), except
// that the CPU backend's decode path (few rows per kv head) reads the kept
// pages in place. CUDA tensors go to the CUDA backend's kernels
// (cuda/kvcache/), which read the lengths on the device.
#include "spattn/kvcache.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cpu/fast/decode_rows.hpp"
#if defined(SPATTN_WITH_CUDA)
#include "cuda/kvcache/kvcache_launch.hpp"
#endif
#include "plan/plan_state.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"
#include "tensor_checks.hpp"

namespace spattn {
namespace {

int64_t new_rows(const TensorView* k_new) { return k_new ? k_new->seq_len() : 0; }

bool paged(const KvCacheView& cache) { return cache.page_table != nullptr; }

// Keys per page: the page size, or the whole contiguous cache of a sequence.
int64_t page_size(const KvCacheView& cache) { return cache.k_cache.seq_len(); }

// The physical page of sequence b's logical page `page`, checked: only the
// pages a call writes or its mask keeps are looked up (the others' entries
// are never read, and may be -1 for a page the cache owner freed).
int64_t physical_page(const KvCacheView& cache, int64_t b, int64_t page) {
  if (!paged(cache)) return b;
  const int64_t physical = cache.page_table[b * cache.max_pages + page];
  require(physical >= 0 && physical < cache.k_cache.batch(), "page_table[", b, "][", page, "]=", physical,
          " is not a page of the cache (num_pages ", cache.k_cache.batch(), "), and sequence ", b, " reads or "
          "writes that page");
  return physical;
}

// Sequence b's keys after the append.
int64_t keys_of(const KvCacheView& cache, const TensorView* k_new, int64_t b) {
  return static_cast<int64_t>(cache.cache_seqlens[b]) + new_rows(k_new);
}

// Copies row `from_row` of every head of `from` (batch `from_b`) to row
// `to_row` of `to` (batch `to_b`); the two have one dtype and head dim.
void copy_row(const TensorView& from, int64_t from_b, int64_t from_row, const TensorView& to, int64_t to_b,
              int64_t to_row) {
  const int64_t elem = dtype_size(from.dtype);
  for (int64_t h = 0; h < from.heads(); ++h) {
    if (from.stride[3] == 1 && to.stride[3] == 1) {
      std::memcpy(static_cast<char*>(to.data) + to.offset(to_b, h, to_row, 0) * elem,
                  static_cast<const char*>(from.data) + from.offset(from_b, h, from_row, 0) * elem,
                  static_cast<size_t>(from.head_dim() * elem));
      continue;
    }
    for (int64_t d = 0; d < from.head_dim(); ++d) to.store(to_b, h, to_row, d, from.load(from_b, h, from_row, d));
  }
}

// Folds row r of the new keys of sequence b into the summaries of the page
// it lands in (a page written from its first row starts afresh).
void summarise(const KvCacheView& cache, const TensorView& k_new, int64_t b, int64_t r, int64_t page, int64_t offset) {
  for (int64_t h = 0; h < k_new.heads(); ++h)
    for (int64_t d = 0; d < k_new.head_dim(); ++d) {
      const double x = k_new.load(b, h, r, d);
      const bool first = offset == 0;
      cache.page_min.store(page, h, 0, d, first ? x : std::min(x, cache.page_min.load(page, h, 0, d)));
      cache.page_max.store(page, h, 0, d, first ? x : std::max(x, cache.page_max.load(page, h, 0, d)));
    }
}

// The new keys and values of sequence b into the cache at its length.
void append(const KvCacheView& cache, const TensorView& k_new, const TensorView& v_new, int64_t b) {
  const int64_t size = page_size(cache);
  for (int64_t r = 0; r < k_new.seq_len(); ++r) {
    const int64_t pos = cache.cache_seqlens[b] + r, page = physical_page(cache, b, pos / size);
    copy_row(k_new, b, r, cache.k_cache, page, pos % size);
    copy_row(v_new, b, r, cache.v_cache, page, pos % size);
    if (cache.page_min.data != nullptr) summarise(cache, k_new, b, r, page, pos % size);
  }
}

// The mask of sequence b's chosen pages (KvCacheView::pages): one mask head
// per kv head (its query heads share it), its chosen pages and the pages the
// new keys land in, in one query block; a page whose keys all precede the
// first query row is full, the others partial under the causal pattern
// (bottom-right).
BlockMask chosen_pages_mask(const KvCacheView& cache, int64_t b, int64_t q_len, int64_t k_len, int64_t new_keys) {
  const int64_t size = page_size(cache), kv_heads = cache.k_cache.heads();
  const int64_t num_pages = (k_len + size - 1) / size;
  const int64_t first_new_page = new_keys > 0 ? cache.cache_seqlens[b] / size : num_pages;
  const int64_t first_position = k_len - q_len;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  std::vector<uint8_t> full;
  for (int64_t g = 0; g < kv_heads; ++g) {
    std::vector<int32_t> pages;
    for (int64_t slot = 0; slot < cache.pages_per_head; ++slot) {
      const int64_t page = cache.pages[(b * kv_heads + g) * cache.pages_per_head + slot];
      if (page == -1) continue;
      require(page >= 0 && page < num_pages, "pages[", b, "][", g, "][", slot, "]=", page, " is not a page of "
              "sequence ", b, ", which holds ", num_pages, " pages of ", size, " keys (-1 marks an unused slot)");
      pages.push_back(static_cast<int32_t>(page));
    }
    for (int64_t page = first_new_page; page < num_pages; ++page) pages.push_back(static_cast<int32_t>(page));
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    for (const int32_t page : pages) {
      indices.push_back(page);
      full.push_back(std::min(k_len, (page + 1) * size) - 1 <= first_position ? 1 : 0);
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  return BlockMask(q_len, k_len, q_len, size, kv_heads, std::move(offsets), std::move(indices), std::move(full),
                   std::make_shared<const Pattern>(Pattern::causal()));
}

// The pattern of sequence b's mask: the call's mask's, or dense.
Pattern pattern_of(const BlockMask* mask) { return mask ? *mask->pattern() : Pattern::dense(); }

// The logical pages (key blocks of one page) that `own` keeps for any query row of any head.
std::vector<int64_t> kept_pages(const BlockMask& own) {
  std::vector<uint8_t> kept(static_cast<size_t>(own.num_k_blocks()), 0);
  for (const int32_t kb : own.kv_indices()) kept[static_cast<size_t>(kb)] = 1;
  std::vector<int64_t> pages;
  for (int64_t kb = 0; kb < own.num_k_blocks(); ++kb)
    if (kept[static_cast<size_t>(kb)]) pages.push_back(kb);
  return pages;
}

// Scratch of one sequence's keys and values, (1, Hkv, Lk, D) each, holding
// only the pages its mask keeps; the rest is never written or read (and, left
// uninitialised, never takes memory).
class GatheredKeys {
 public:
  GatheredKeys(const KvCacheView& cache, const BlockMask& own, int64_t b, int64_t k_len) {
    const TensorView& kc = cache.k_cache;
    const int64_t heads = kc.heads(), dim = kc.head_dim(), elem = dtype_size(kc.dtype);
    const int64_t bytes = bytes_for(bytes_for(heads * k_len, dim), elem);
    MemoryEstimate("attention_with_kvcache (sequence " + std::to_string(b) + ", " + std::to_string(k_len) +
                   " keys)")
        .add("its gathered keys and values", add_bytes(bytes, bytes))
        .check();
    k_storage_.reset(new unsigned char[static_cast<size_t>(bytes)]);
    v_storage_.reset(new unsigned char[static_cast<size_t>(bytes)]);
    k = make_bhld(k_storage_.get(), kc.dtype, 1, heads, k_len, dim);
    v = make_bhld(v_storage_.get(), kc.dtype, 1, heads, k_len, dim);
    const int64_t size = page_size(cache);
    for (const int64_t page : kept_pages(own)) {
      const int64_t physical = physical_page(cache, b, page);
      for (int64_t row = page * size; row < std::min(k_len, (page + 1) * size); ++row) {
        copy_row(cache.k_cache, physical, row - page * size, k, 0, row);
        copy_row(cache.v_cache, physical, row - page * size, v, 0, row);
      }
    }
  }

  TensorView k, v;

 private:
  std::unique_ptr<unsigned char[]> k_storage_, v_storage_;
};

}  // namespace

void validate_attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                                     const TensorView* v_new, const TensorView& out, const BlockMask* mask,
                                     const TensorView* lse) {
  validate_tensor(q, "q");
  validate_tensor(out, "out");
  require_same_shape(out, "out", q, "q");
  validate_tensor(cache.k_cache, "k_cache");
  validate_tensor(cache.v_cache, "v_cache");
  require_same_shape(cache.v_cache, "v_cache", cache.k_cache, "k_cache");
  require(cache.k_cache.dtype == q.dtype && cache.v_cache.dtype == q.dtype, "k_cache and v_cache dtype must equal "
          "q dtype (", dtype_name(q.dtype), "), got ", dtype_name(cache.k_cache.dtype), " and ",
          dtype_name(cache.v_cache.dtype));
  require(cache.k_cache.head_dim() == q.head_dim(), "k_cache head_dim (", cache.k_cache.head_dim(),
          ") must equal q head_dim (", q.head_dim(), ")");
  const int64_t kv_heads = cache.k_cache.heads();
  require(kv_heads > 0 && q.heads() % kv_heads == 0, "q heads (", q.heads(), ") must be a multiple of the cache's "
          "kv heads (", kv_heads, ")");
  require(page_size(cache) > 0, "the cache's pages must hold at least one key, got page_size ", page_size(cache));
  if (lse) {
    validate_tensor(*lse, "lse");
    require(lse->dtype == DType::F32, "lse dtype must be fp32, got ", dtype_name(lse->dtype));
    require(lse->batch() == q.batch() && lse->heads() == q.heads() && lse->seq_len() == q.seq_len(),
            "lse must be (batch, Hq, Lq) = (", q.batch(), ", ", q.heads(), ", ", q.seq_len(), ")");
  }
  require((k_new == nullptr) == (v_new == nullptr), "k and v (the new keys and values) come together: give both "
          "or neither");
  if (k_new) {
    validate_tensor(*k_new, "k");
    validate_tensor(*v_new, "v");
    require_same_shape(*v_new, "v", *k_new, "k");
    require(k_new->dtype == q.dtype, "k dtype (", dtype_name(k_new->dtype), ") must equal q dtype (",
            dtype_name(q.dtype), ")");
    require(k_new->batch() == q.batch() && k_new->heads() == kv_heads && k_new->head_dim() == q.head_dim(),
            "k (new keys) must be (batch, Hkv, L_new, D) = (", q.batch(), ", ", kv_heads, ", L_new, ", q.head_dim(),
            "), got (", k_new->batch(), ", ", k_new->heads(), ", ", k_new->seq_len(), ", ", k_new->head_dim(), ")");
  }
  const bool summaries = cache.page_min.data != nullptr || cache.page_max.data != nullptr;
  if (summaries || cache.pages) {
    require(paged(cache), "page summaries and chosen pages need a paged cache (a page_table)");
  }
  if (summaries) {
    for (const auto& [t, name] : {std::pair{&cache.page_min, "page_min"}, std::pair{&cache.page_max, "page_max"}}) {
      validate_tensor(*t, name);
      require(t->dtype == DType::F32 && t->batch() == cache.k_cache.batch() && t->heads() == kv_heads &&
                  t->seq_len() == 1 && t->head_dim() == q.head_dim(),
              name, " must be fp32 (num_pages, Hkv, D) = (", cache.k_cache.batch(), ", ", kv_heads, ", ",
              q.head_dim(), ")");
    }
  }
  if (cache.pages) {
    require(mask == nullptr, "give a mask or chosen pages, not both: the pages say which keys each head reads");
    require(cache.pages_per_head > 0, "pages must hold at least one slot per kv head, got ", cache.pages_per_head);
  }
  if (mask) {
    require(mask->pattern() != nullptr, "attention_with_kvcache: the mask must come from a pattern (its pattern is "
            "applied at each sequence's lengths), not from block arrays alone");
    require(mask->pattern()->is_prefix_stable(), "attention_with_kvcache: the pattern ", mask->pattern()->describe(),
            " depends on the sequence lengths (BigBird, custom masks), so it cannot follow a growing cache");
  }
  if (q.batch() == 0) return;
  require(cache.cache_seqlens != nullptr, "cache_seqlens is a null pointer");
  int64_t capacity = page_size(cache);
  if (paged(cache)) {
    require(cache.max_pages > 0, "page_table must have at least one page per sequence, got max_pages ",
            cache.max_pages);
    capacity = bytes_for(cache.max_pages, page_size(cache));
  } else {
    require(cache.k_cache.batch() == q.batch(), "a contiguous cache holds one sequence per batch element: k_cache "
            "batch (", cache.k_cache.batch(), ") must equal q batch (", q.batch(), ")");
  }
  if (detail::tensor_device(q.data) >= 0) return;  // device lengths: the kernels check them
  for (int64_t b = 0; b < q.batch(); ++b) {
    require(cache.cache_seqlens[b] >= 0, "cache_seqlens[", b, "] must be >= 0, got ", cache.cache_seqlens[b]);
    const int64_t k_len = keys_of(cache, k_new, b);
    require(k_len <= capacity, "sequence ", b, " needs ", k_len, " keys (cache_seqlens[", b, "]=",
            cache.cache_seqlens[b], " + ", new_rows(k_new), " new) but its cache holds ", capacity);
    require(q.seq_len() <= k_len, "sequence ", b, " has ", q.seq_len(), " queries but ", k_len,
            " keys; the queries are its last positions, so Lq <= cache_seqlens + L_new");
  }
}

void attention_with_kvcache(const TensorView& q, const KvCacheView& cache, const TensorView* k_new,
                            const TensorView* v_new, const TensorView& out, const BlockMask* mask,
                            const AttentionOptions& options, const TensorView* lse) {
  validate_attention_with_kvcache(q, cache, k_new, v_new, out, mask, lse);
  const double scale = resolve_scale(options, q.head_dim());
  if (detail::tensor_device(q.data) >= 0) {
    require(options.backend == Backend::Auto || options.backend == Backend::Cuda, "backend '",
            backend_name(options.backend), "' needs host tensors, got CUDA tensors");
#if defined(SPATTN_WITH_CUDA)
    cuda_detail::cuda_attention_with_kvcache(q, cache, k_new, v_new, out, mask, scale, lse,
                                             static_cast<cudaStream_t>(options.stream));
#endif
    return;
  }
  const Backend backend = detail::host_only_backend(options.backend, q, "KV-cache path");
  AttentionOptions per_sequence = options;
  per_sequence.backend = backend;
  const Pattern pattern = pattern_of(mask);
  for (int64_t b = 0; b < q.batch(); ++b) {
    if (k_new) append(cache, *k_new, *v_new, b);
    if (q.heads() == 0 || q.seq_len() == 0) continue;
    const int64_t k_len = keys_of(cache, k_new, b);
    MaskShape shape;
    shape.q_len = q.seq_len();
    shape.k_len = k_len;
    shape.block_q = mask ? mask->block_q() : 128;
    shape.block_k = paged(cache) ? page_size(cache) : (mask ? mask->block_k() : 128);
    shape.num_heads = q.heads();
    const BlockMask own = cache.pages ? chosen_pages_mask(cache, b, q.seq_len(), k_len, new_rows(k_new))
                                      : BlockMask::build(pattern.within_length(k_len), shape);
    const TensorView q_b = batch_slice(q, b), out_b = batch_slice(out, b);
    const TensorView lse_b = lse ? batch_slice(*lse, b) : TensorView{};
    if (paged(cache) && backend == Backend::Cpu &&
        cpu_fast::decode_rows_fit(CallShape{1, q.heads(), cache.k_cache.heads(), q.seq_len(), k_len, q.head_dim(),
                                            q.dtype})) {
      // Few rows: the CPU decode path reads the kept pages in place.
      for (const int64_t page : kept_pages(own)) physical_page(cache, b, page);  // each page it reads, checked
      const cpu_fast::KeyRows pages{cache.k_cache, cache.v_cache, cache.page_table + b * cache.max_pages,
                                    cache.max_pages, page_size(cache)};
      cpu_fast::run_decode_rows(q_b, pages, out_b, own, scale, lse ? &lse_b : nullptr);
    } else if (paged(cache)) {
      const GatheredKeys keys(cache, own, b, k_len);
      attention(q_b, keys.k, keys.v, out_b, own, per_sequence, lse ? &lse_b : nullptr);
    } else {
      attention(q_b, seq_slice(batch_slice(cache.k_cache, b), 0, k_len),
                seq_slice(batch_slice(cache.v_cache, b), 0, k_len), out_b, own, per_sequence, lse ? &lse_b : nullptr);
    }
  }
}

}  // namespace spattn
