// python/csrc/attention_ops.cpp - the spattn::attention operator and its CPU kernel.
//
// The operator is a pure function of tensors and integers, so torch.compile
// can trace it (its fake kernel lives in spattn/_ops.py) and CUDA graphs can
// capture it: the BlockMask crosses as its arrays (row_offsets int64,
// kv_indices int32, kv_full uint8, on the device of q), its lengths and block
// sizes, and its pattern encoded as an int list plus two tables
// (spattn/pattern_codec.hpp). The code is an int list rather than a tensor so
// that it is a constant of the graph and never a host tensor beside device
// inputs. The operator always returns (out, lse): out with the strides of q,
// lse (B, Hq, Lq) fp32.
//
// The CPU kernel rebuilds the BlockMask on the host (linear in the kept
// blocks, small next to the attention itself) and runs spattn::attention with
// a host backend: "auto" is the fast CPU backend, or the exact fp64 reference
// for float64 inputs.
#include <torch/library.h>

#include <string>

#include "attention_op.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

std::tuple<at::Tensor, at::Tensor> attention_cpu(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t mask_q_len,
    int64_t mask_k_len, int64_t block_q, int64_t block_k, const at::Tensor& row_offsets,
    const at::Tensor& kv_indices, const at::Tensor& kv_full, at::IntArrayRef code,
    const at::Tensor& table_i32, const at::Tensor& table_i64, std::optional<double> scale,
    c10::string_view backend) {
  return run_with_value_errors([&] {
    AttentionCall call(q, k, v, scale);
    const Backend host = host_backend(backend, call.q.dtype);  // checked for empty calls too
    if (call.empty()) return call.result();
    const MaskTensors mask{mask_q_len,  mask_k_len, block_q, block_k,   row_offsets,
                           kv_indices,  kv_full,    code,    table_i32, table_i64};
    call.run(host_block_mask(mask), host);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_FRAGMENT(spattn, m) {
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, int mask_q_len, int mask_k_len, int block_q, "
      "int block_k, Tensor row_offsets, Tensor kv_indices, Tensor kv_full, int[] code, "
      "Tensor table_i32, Tensor table_i64, float? scale, str backend) -> (Tensor out, Tensor lse)");
}

TORCH_LIBRARY_IMPL(spattn, CPU, m) {
  m.impl("attention", &spattn::torch_bridge::attention_cpu);
}
