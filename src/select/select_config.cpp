// select/select_config.cpp - validation of SelectConfig and of the tensors a
// selection reads, and their resolution into SelectParams for one shape.
#include "select/select_config.hpp"

#include <cmath>
#include <limits>

#include "spattn/error.hpp"

namespace spattn {

void validate_select_config(const SelectConfig& c) {
  require(c.block_q > 0, "block_q must be > 0, got ", c.block_q);
  require(c.block_k > 0, "block_k must be > 0, got ", c.block_k);
  require(c.topk.has_value() != c.tau.has_value(), "exactly one of topk and tau must be set, got ",
          c.topk ? "both" : "neither");
  if (c.topk) require(*c.topk >= 1, "topk must be >= 1, got ", *c.topk);
  if (c.tau) require(*c.tau > 0.0 && *c.tau <= 1.0, "tau must be in (0, 1], got ", *c.tau);
  require(c.min_blocks >= 0, "min_blocks must be >= 0, got ", c.min_blocks);
  require(c.max_blocks >= 0, "max_blocks must be >= 0 (0 = no limit), got ", c.max_blocks);
  require(c.sink_blocks >= 0, "sink_blocks must be >= 0, got ", c.sink_blocks);
  require(c.local_blocks >= 0, "local_blocks must be >= 0, got ", c.local_blocks);
  require(c.sink_blocks <= std::numeric_limits<int32_t>::max(), "sink_blocks must fit in 32 bits, got ",
          c.sink_blocks);
  require(c.local_blocks <= std::numeric_limits<int32_t>::max(), "local_blocks must fit in 32 bits, got ",
          c.local_blocks);
  if (c.max_blocks > 0) {
    require(c.min_blocks <= c.max_blocks, "min_blocks (", c.min_blocks, ") must be <= max_blocks (",
            c.max_blocks, ")");
    require(c.sink_blocks + c.local_blocks <= c.max_blocks, "sink_blocks + local_blocks (",
            c.sink_blocks + c.local_blocks, ") must be <= max_blocks (", c.max_blocks,
            ") so the forced blocks fit");
    if (c.topk)
      require(*c.topk <= c.max_blocks, "topk (", *c.topk, ") must be <= max_blocks (", c.max_blocks, ")");
  }
  require(c.stride >= 0, "stride must be >= 0 (0 = mean pooling), got ", c.stride);
  require(c.stride <= c.block_q && c.stride <= c.block_k, "stride (", c.stride, ") must be <= block_q (",
          c.block_q, ") and block_k (", c.block_k, ")");
  if (c.scale) require(std::isfinite(*c.scale), "scale must be finite, got ", *c.scale);
}

namespace select_detail {

void validate_qk_pair(const TensorView& q, const TensorView& k, bool same_dtype) {
  const TensorView* views[2] = {&q, &k};
  const char* names[2] = {"q", "k"};
  static const char* axes[4] = {"batch", "heads", "seq_len", "head_dim"};
  for (int t = 0; t < 2; ++t) {
    require(views[t]->data != nullptr, names[t], " has a null data pointer");
    for (int axis = 0; axis < 4; ++axis)
      require(views[t]->shape[axis] > 0, names[t], " ", axes[axis], " must be > 0, got ",
              views[t]->shape[axis]);
  }
  if (same_dtype)
    require(k.dtype == q.dtype, "k dtype (", dtype_name(k.dtype), ") must equal q dtype (",
            dtype_name(q.dtype), ")");
  require(k.batch() == q.batch(), "k batch (", k.batch(), ") must equal q batch (", q.batch(), ")");
  require(q.heads() % k.heads() == 0, "q heads (", q.heads(), ") must be a multiple of k heads (", k.heads(),
          ")");
  require(k.head_dim() == q.head_dim(), "k head_dim (", k.head_dim(), ") must equal q head_dim (",
          q.head_dim(), ")");
}

void validate_select_inputs(const TensorView& q, const TensorView& k) { validate_qk_pair(q, k, true); }

SelectParams resolve_select_params(const SelectConfig& c, int64_t q_len, int64_t k_len, int64_t head_dim) {
  validate_select_config(c);
  SelectParams p;
  p.q_len = q_len;
  p.k_len = k_len;
  p.block_q = c.block_q;
  p.block_k = c.block_k;
  p.num_q_blocks = q_len / c.block_q + (q_len % c.block_q != 0 ? 1 : 0);
  p.num_k_blocks = k_len / c.block_k + (k_len % c.block_k != 0 ? 1 : 0);
  require(p.num_k_blocks <= std::numeric_limits<int32_t>::max(),
          "the number of key blocks must fit in 32 bits, got ", p.num_k_blocks, " (k_len=", k_len,
          ", block_k=", c.block_k, ")");
  p.use_tau = c.tau ? 1 : 0;
  p.causal = c.causal ? 1 : 0;
  p.topk = c.topk ? *c.topk : 0;
  p.tau = c.tau ? *c.tau : 1.0;
  p.min_blocks = c.min_blocks;
  p.max_blocks = c.max_blocks;
  p.sink_blocks = c.sink_blocks;
  p.local_blocks = c.local_blocks;
  p.stride = c.stride;
  p.scale = c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  return p;
}

}  // namespace select_detail
}  // namespace spattn
