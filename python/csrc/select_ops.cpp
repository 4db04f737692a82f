// python/csrc/select_ops.cpp - the spattn::select_blocks operator: dynamic
// block selection (spattn/select.hpp) for the Python package; also the
// schemas of spattn::select_blocks_device and spattn::dynamic_attention,
// whose kernels are CUDA-only (select_cuda.cpp, dynamic_cuda.cpp).
//
// The operator takes host tensors q (B, Hq, Lq, D) and k (B, Hkv, Lk, D) in
// any dtype and layout plus the fields of spattn::SelectConfig, runs
// spattn::select_blocks_batched, and returns one plan per batch element
// (row_offsets int64, kv_indices int32, kv_full uint8) and the masks' shared
// pattern (causal or dense) encoded as in pattern_ops.cpp. Like the pattern
// builders it runs eagerly on the host; spattn/dynamic.py copies device
// tensors to the host first and moves the masks back.
#include <torch/library.h>

#include <optional>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/select.hpp"
#include "select_op_args.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

using SelectedMasks = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>,
                                 at::Tensor, at::Tensor, at::Tensor>;

SelectedMasks select_blocks_op(const at::Tensor& q, const at::Tensor& k, int64_t block_q, int64_t block_k,
                               std::optional<int64_t> topk, std::optional<double> tau, int64_t min_blocks,
                               int64_t max_blocks, int64_t sink_blocks, int64_t local_blocks, bool causal,
                               int64_t stride, bool per_query_head, std::optional<double> scale) {
  TORCH_CHECK_VALUE(q.device().is_cpu() && k.device().is_cpu(), "select_blocks reads host tensors, got q on ",
                    q.device(), " and k on ", k.device());
  return run_with_value_errors([&] {
    const SelectConfig config = select_config_of(block_q, block_k, topk, tau, min_blocks, max_blocks,
                                                 sink_blocks, local_blocks, causal, stride, per_query_head,
                                                 scale);
    const std::vector<BlockMask> masks = select_blocks_batched(view_of(q, "q"), view_of(k, "k"), config);
    std::vector<at::Tensor> offsets, indices, full;
    for (const BlockMask& mask : masks) {
      offsets.push_back(tensor_of(mask.row_offsets()));
      indices.push_back(tensor_of(mask.kv_indices()));
      full.push_back(tensor_of(mask.kv_full()));
    }
    const auto [code, table_i32, table_i64] = pattern_tensors(*masks.front().pattern());
    return SelectedMasks{offsets, indices, full, code, table_i32, table_i64};
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "select_blocks(Tensor q, Tensor k, int block_q, int block_k, int? topk, float? tau, int min_blocks, "
      "int max_blocks, int sink_blocks, int local_blocks, bool causal, int stride, bool per_query_head, "
      "float? scale) -> (Tensor[] row_offsets, Tensor[] kv_indices, Tensor[] kv_full, Tensor code, "
      "Tensor table_i32, Tensor table_i64)",
      &spattn::torch_bridge::select_blocks_op);
  m.def(
      "select_blocks_device(Tensor q, Tensor k, int block_q, int block_k, int? topk, float? tau, "
      "int min_blocks, int max_blocks, int sink_blocks, int local_blocks, bool causal, int stride, "
      "bool per_query_head, float? scale) -> (Tensor row_offsets, Tensor kv_indices, Tensor kv_full, "
      "Tensor code, Tensor table_i32, Tensor table_i64)");
  m.def(
      "dynamic_attention(Tensor q, Tensor k, Tensor v, int block_q, int block_k, int? topk, float? tau, "
      "int min_blocks, int max_blocks, int sink_blocks, int local_blocks, bool causal, int stride, "
      "bool per_query_head, float? scale) -> (Tensor out, Tensor lse)");
}
