// python/csrc/attention_kvcache_op.hpp - the arguments of one
// spattn::attention_with_kvcache call as spattn views, shared by its CPU
// kernel (attention_kvcache_ops.cpp) and its CUDA kernel (attention_cuda.cpp).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "spattn/kvcache.hpp"

namespace spattn::torch_bridge {

// The cache, the query and new rows as (B, H, L, D) views, and the results
// (out (B, Lq, Hq, D) like q, lse (B, Hq, Lq) fp32), allocated here. The int32
// tensors are made contiguous on their own device (the CPU kernel reads them
// on the host, the CUDA kernels on the device).
struct KvCacheCall {
  KvCacheCall(const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache, const std::optional<at::Tensor>& k,
              const std::optional<at::Tensor>& v, const at::Tensor& cache_seqlens,
              const std::optional<at::Tensor>& page_table, const std::optional<at::Tensor>& pages,
              const std::optional<at::Tensor>& page_min, const std::optional<at::Tensor>& page_max,
              std::optional<double> scale);

  void run(const BlockMask* mask) const;
  std::tuple<at::Tensor, at::Tensor> result() const { return {out, lse}; }

  KvCacheView cache;
  TensorView q_view, out_view, lse_view;
  std::optional<TensorView> k_view, v_view;
  AttentionOptions options;
  at::Tensor out, lse;

 private:
  at::Tensor seqlens_, table_, chosen_;
};

}  // namespace spattn::torch_bridge
