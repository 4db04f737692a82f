// attention_varlen_backward.cpp - gradients of attention_varlen() on the host
// backends: validation, then each sequence's backward on its own rows with
// the mask of its own lengths (the forward's walk, varlen_sequences.hpp). The
// rows of a sequence without queries get zero dk and dv: no query reads them.
#include <algorithm>

#include "spattn/backward.hpp"
#include "spattn/error.hpp"
#include "plan/plan_state.hpp"
#include "tensor_checks.hpp"
#include "varlen_sequences.hpp"

namespace spattn {

void validate_attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                        const AttentionGrads& grads, const VarlenBatch& batch,
                                        const BlockMask& mask, const TensorView* d_lse) {
  validate_attention_varlen(q, k, v, out, batch, mask, &lse);
  validate_gradient_tensors(q, k, v, lse, d_out, grads, d_lse);
}

namespace {

// Writes 0 to every element of a host view.
void fill_zero(const TensorView& t) {
  for (int64_t b = 0; b < t.batch(); ++b)
    for (int64_t h = 0; h < t.heads(); ++h)
      for (int64_t l = 0; l < t.seq_len(); ++l)
        for (int64_t d = 0; d < t.head_dim(); ++d) t.store(b, h, l, d, 0.0);
}

}  // namespace

void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse, const TensorView& d_out,
                               const AttentionGrads& grads, const VarlenBatch& batch, const BlockMask& mask,
                               const AttentionOptions& options, const TensorView* d_lse) {
  validate_attention_varlen_backward(q, k, v, out, lse, d_out, grads, batch, mask, d_lse);
  const double scale = resolve_scale(options, q.head_dim());
  const Backend backend = detail::host_only_backend(options.backend, q, "varlen backward");
  check_cu_seqlens(batch, q.seq_len(), k.seq_len());
  for (int64_t b = 0; b < batch.num_seqs; ++b) {
    const detail::VarlenSequence s = detail::varlen_sequence(batch, b);
    const AttentionGrads own_grads{seq_slice(grads.dq, s.q_first, s.q_len), seq_slice(grads.dk, s.k_first, s.k_len),
                                   seq_slice(grads.dv, s.k_first, s.k_len)};
    if (s.q_len == 0 || q.heads() == 0) {
      fill_zero(own_grads.dk);
      fill_zero(own_grads.dv);
      continue;
    }
    const BlockMask own = detail::sequence_mask(mask, s, q.heads());
    const TensorView d_lse_s = d_lse ? seq_slice(*d_lse, s.q_first, s.q_len) : TensorView{};
    const TensorView qs = seq_slice(q, s.q_first, s.q_len), ks = seq_slice(k, s.k_first, s.k_len),
                     vs = seq_slice(v, s.k_first, s.k_len), outs = seq_slice(out, s.q_first, s.q_len),
                     lses = seq_slice(lse, s.q_first, s.q_len), d_outs = seq_slice(d_out, s.q_first, s.q_len);
    if (backend == Backend::Reference)
      reference_attention_backward(qs, ks, vs, outs, lses, d_outs, own_grads, own, scale, d_lse ? &d_lse_s : nullptr);
    else
      cpu_attention_backward(qs, ks, vs, outs, lses, d_outs, own_grads, own, scale, d_lse ? &d_lse_s : nullptr);
  }
}

}  // namespace spattn
