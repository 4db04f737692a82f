// python/csrc/select_op_args.hpp - the selection arguments shared by the
// spattn::select_blocks and spattn::dynamic_attention operators (in their
// schema order) as a spattn::SelectConfig, validated where it is used.
#pragma once

#include <cstdint>
#include <optional>

#include "spattn/select.hpp"

namespace spattn::torch_bridge {

inline SelectConfig select_config_of(int64_t block_q, int64_t block_k, std::optional<int64_t> topk,
                                     std::optional<double> tau, int64_t min_blocks, int64_t max_blocks,
                                     int64_t sink_blocks, int64_t local_blocks, bool causal, int64_t stride,
                                     bool per_query_head, std::optional<double> scale) {
  SelectConfig c;
  c.block_q = block_q;
  c.block_k = block_k;
  c.topk = topk;
  c.tau = tau;
  c.min_blocks = min_blocks;
  c.max_blocks = max_blocks;
  c.sink_blocks = sink_blocks;
  c.local_blocks = local_blocks;
  c.causal = causal;
  c.stride = stride;
  c.per_query_head = per_query_head;
  c.scale = scale;
  return c;
}

}  // namespace spattn::torch_bridge
