// python/csrc/attention_kvcache_ops.cpp - the spattn::attention_with_kvcache
// operator and its CPU kernel (spattn/kvcache.hpp).
//
// FlashAttention's layout: q (B, Lq, Hq, D); caches (num_pages, page_size,
// Hkv, D) with an int32 page_table (B, max_pages), or contiguous (B, Lk_max,
// Hkv, D) without one; optional new k, v (B, L_new, Hkv, D) written into the
// caches in place (the schema marks both caches mutated); int32 cache_seqlens
// (B). The mask crosses as for spattn::attention (its pattern is applied at
// each sequence's lengths), or None for dense attention; or int32 chosen
// pages (B, Hkv, n) replace it. Optional fp32 page_min, page_max (num_pages,
// Hkv, D) are updated by the append (also marked mutated). Returns (out (B, Lq,
// Hq, D), lse (B, Hq, Lq) fp32). The CUDA kernel is in attention_cuda.cpp.
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <utility>

#include "attention_kvcache_op.hpp"
#include "attention_op.hpp"
#include "mask_registry.hpp"
#include "spattn/kvcache.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

// (B, L, H, D) -> its logical (B, H, L, D) view; errors name `name`.
TensorView blhd_view_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 4, name, " must be 4-D (batch or pages, seq_len, heads, head_dim), got ", t.dim(),
                    "-D shape ", t.sizes());
  return view_of(t.transpose(1, 2), name);
}

// An int32 argument of `dims` dimensions on q's device, contiguous.
at::Tensor int32_contiguous(const at::Tensor& t, int64_t dims, const char* name, const at::Device& device) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, name, " dtype must be torch.int32, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == device, name, " is on ", t.device(), " but q is on ", device);
  TORCH_CHECK_VALUE(t.dim() == dims, name, " must be ", dims, "-D, got shape ", t.sizes());
  return t.contiguous();
}

}  // namespace

KvCacheCall::KvCacheCall(const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache,
                         const std::optional<at::Tensor>& k, const std::optional<at::Tensor>& v,
                         const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& page_table,
                         const std::optional<at::Tensor>& pages, const std::optional<at::Tensor>& page_min,
                         const std::optional<at::Tensor>& page_max, std::optional<double> scale) {
  seqlens_ = int32_contiguous(cache_seqlens, 1, "cache_seqlens", q.device());
  TORCH_CHECK_VALUE(seqlens_.size(0) == q.size(0), "cache_seqlens has ", seqlens_.size(0), " entries but q has batch ",
                    q.size(0));
  cache.k_cache = blhd_view_of(k_cache, "k_cache");
  cache.v_cache = blhd_view_of(v_cache, "v_cache");
  cache.cache_seqlens = seqlens_.data_ptr<int32_t>();
  if (page_table) {
    table_ = int32_contiguous(*page_table, 2, "page_table", q.device());
    TORCH_CHECK_VALUE(table_.size(0) == q.size(0), "page_table has ", table_.size(0), " rows but q has batch ",
                      q.size(0));
    cache.page_table = table_.data_ptr<int32_t>();
    cache.max_pages = table_.size(1);
  }
  TORCH_CHECK_VALUE(page_min.has_value() == page_max.has_value(), "page_min and page_max come together: give both "
                    "or neither");
  if (page_min) {
    for (const auto& [t, name] : {std::pair{&*page_min, "page_min"}, std::pair{&*page_max, "page_max"}}) {
      TORCH_CHECK_VALUE(t->dim() == 3, name, " must be 3-D (num_pages, Hkv, head_dim), got shape ", t->sizes());
      TORCH_CHECK_TYPE(t->scalar_type() == at::kFloat, name, " dtype must be torch.float32, got ", t->scalar_type());
    }
    cache.page_min = view_of(page_min->unsqueeze(2), "page_min");
    cache.page_max = view_of(page_max->unsqueeze(2), "page_max");
  }
  if (pages) {
    chosen_ = int32_contiguous(*pages, 3, "pages", q.device());
    TORCH_CHECK_VALUE(chosen_.size(0) == q.size(0) && chosen_.size(1) == k_cache.size(2), "pages must be (batch, "
                      "Hkv, n) = (", q.size(0), ", ", k_cache.size(2), ", n), got ", chosen_.sizes());
    cache.pages = chosen_.data_ptr<int32_t>();
    cache.pages_per_head = chosen_.size(2);
  }
  q_view = blhd_view_of(q, "q");
  out = at::empty_like(q);
  lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  out_view = blhd_view_of(out, "out");
  lse_view = lse_view_of(lse);
  if (k) k_view = blhd_view_of(*k, "k");
  if (v) v_view = blhd_view_of(*v, "v");
  options.scale = scale;
}

void KvCacheCall::run(const BlockMask* mask) const {
  attention_with_kvcache(q_view, cache, k_view ? &*k_view : nullptr, v_view ? &*v_view : nullptr, out_view, mask,
                         options, &lse_view);
}

namespace {

std::tuple<at::Tensor, at::Tensor> attention_with_kvcache_cpu(
    const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache, const std::optional<at::Tensor>& k,
    const std::optional<at::Tensor>& v, const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& page_table,
    const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& pages,
    const std::optional<at::Tensor>& page_min, const std::optional<at::Tensor>& page_max, std::optional<double> scale,
    c10::string_view backend) {
  return run_with_value_errors([&] {
    KvCacheCall call(q, k_cache, v_cache, k, v, cache_seqlens, page_table, pages, page_min, page_max, scale);
    call.options.backend = host_backend(backend, dtype_of(q, "q"));
    const std::shared_ptr<const BlockMask> registered =
        mask ? registered_mask(mask, q.size(1), q.size(1)) : std::shared_ptr<const BlockMask>();
    call.run(registered.get());
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention_with_kvcache(Tensor q, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor? k, Tensor? v, "
      "Tensor cache_seqlens, Tensor? page_table, Tensor? mask, Tensor? pages, Tensor(c!)? page_min, "
      "Tensor(d!)? page_max, float? scale, str backend) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention_with_kvcache", &spattn::torch_bridge::attention_with_kvcache_cpu);
}
