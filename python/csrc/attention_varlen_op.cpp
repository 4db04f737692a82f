// python/csrc/attention_varlen_op.cpp - one call of the spattn::attention_varlen
// operator (see attention_varlen_op.hpp).
#include "attention_varlen_op.hpp"

#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

at::Tensor offsets_of(const at::Tensor& cu, const at::Tensor& q, const char* name) {
  TORCH_CHECK_TYPE(cu.scalar_type() == at::kInt, name, " dtype must be torch.int32, got ", cu.scalar_type());
  TORCH_CHECK_VALUE(cu.dim() == 1 && cu.size(0) >= 1, name, " must be 1-D with batch + 1 >= 1 entries, got shape ",
                    cu.sizes());
  TORCH_CHECK_VALUE(cu.device() == q.device(), name, " is on ", cu.device(), " but q is on ", q.device());
  return cu.contiguous();
}

}  // namespace

TensorView packed_view_of(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() == 3, name, " must be 3-D (total, heads, head_dim), got ", t.dim(), "-D shape ",
                    t.sizes());
  return view_of(t.unsqueeze(0).transpose(1, 2), name);
}

VarlenOffsets::VarlenOffsets(const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                             int64_t max_seqlen_k, const at::Tensor& q)
    : cu_q_(offsets_of(cu_seqlens_q, q, "cu_seqlens_q")), cu_k_(offsets_of(cu_seqlens_k, q, "cu_seqlens_k")) {
  TORCH_CHECK_VALUE(cu_q_.size(0) == cu_k_.size(0), "cu_seqlens_q has ", cu_q_.size(0),
                    " entries but cu_seqlens_k has ", cu_k_.size(0));
  batch.cu_seqlens_q = cu_q_.data_ptr<int32_t>();
  batch.cu_seqlens_k = cu_k_.data_ptr<int32_t>();
  batch.num_seqs = cu_q_.size(0) - 1;
  batch.max_seqlen_q = max_seqlen_q;
  batch.max_seqlen_k = max_seqlen_k;
}

VarlenCall::VarlenCall(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                       const at::Tensor& cu_seqlens_q, const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q,
                       int64_t max_seqlen_k, std::optional<double> scale)
    : q(packed_view_of(q_in, "q")),
      k(packed_view_of(k_in, "k")),
      v(packed_view_of(v_in, "v")),
      offsets(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, q_in) {
  TORCH_CHECK_VALUE(k_in.device() == q_in.device() && v_in.device() == q_in.device(),
                    "q, k and v must be on one device, got ", q_in.device(), ", ", k_in.device(), " and ",
                    v_in.device());
  out_tensor = at::empty_like(q_in);
  lse_tensor = at::empty({q_in.size(1), q_in.size(0)}, q_in.options().dtype(at::kFloat));
  options.scale = scale;
  empty_ = q_in.numel() == 0;
  if (empty_) return;
  out = packed_view_of(out_tensor, "out");
  lse = lse_view_of(lse_tensor.unsqueeze(0));
}

}  // namespace spattn::torch_bridge
