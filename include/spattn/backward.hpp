// spattn/backward.hpp - gradients of attention() (the backward pass).
//
// attention_backward(q, k, v, out, lse, d_out, grads, mask) writes
//   dq = dL/dq, dk = dL/dk, dv = dL/dv
// for a loss L whose gradient with respect to attention()'s output is d_out
// (and, optionally, with respect to its LSE is d_lse), given the same q, k, v,
// mask and scale and the forward's out and lse. With P the softmax weights of
// the allowed pairs (P = exp(s - lse), s = scale * q.k),
//   dv_j = sum_i P_ij d_out_i,  dP_ij = d_out_i . v_j,
//   dS_ij = P_ij (dP_ij - delta_i),  delta_i = d_out_i . out_i - d_lse_i,
//   dq_i = scale * sum_j dS_ij k_j,  dk_j = scale * sum_i dS_ij q_i,
// with dk and dv summed over the query heads that share a kv head (GQA).
// Rows with no allowed key (lse -inf) contribute nothing; a NaN row (NaN
// lse) spreads NaN into the gradients of everything it read. dq, dk and dv
// are overwritten (any dtype, shapes of q, k and v); the result does not
// depend on the thread count.
//
// Backends: Reference (fp64 accumulation, the oracle), Cpu (fp32
// accumulation over the mask's blocks: one pass over key blocks for dk and dv
// through the key-major lists of the mask, one over query blocks for dq) and
// Cuda (cuda_attention_backward in spattn/cuda.hpp: the same two passes as
// tensor-core kernels on 64 x 64 tiles, fp32 accumulation, deterministic;
// device tensors, fp16 or bf16). Auto picks Cuda for device tensors, Cpu for
// host tensors, Reference for fp64 ones.
#pragma once

#include "spattn/attention.hpp"

namespace spattn {

struct AttentionGrads {
  TensorView dq, dk, dv;
};

// Throws spattn::Error if the tensors, the mask and the options do not fit together.
void validate_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                 const AttentionGrads& grads, const BlockMask& mask,
                                 const TensorView* d_lse);

// The checks of the backward's own tensors against the forward's: d_out has
// q's shape, d_lse (fp32) lse's, and dq, dk, dv the shapes of q, k and v.
void validate_gradient_tensors(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& lse,
                               const TensorView& d_out, const AttentionGrads& grads, const TensorView* d_lse);

// With the plan of the call's shape from the mask's cache (its backward
// lists made on the shape's first backward call).
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& d_out,
                        const AttentionGrads& grads, const BlockMask& mask,
                        const AttentionOptions& options = {}, const TensorView* d_lse = nullptr);

// As `plan` decided it (made with PlanOptions::backward).
void attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const TensorView& lse, const TensorView& d_out,
                        const AttentionGrads& grads, const Plan& plan, const AttentionOptions& options = {},
                        const TensorView* d_lse = nullptr);

// ---- variable-length batches (attention_varlen) ----
//
// The gradients of attention_varlen() on the same packed tensors, batch,
// mask and options, given its out and lse (and d_out, d_lse of the same
// packed shapes). The host backends (Reference, Cpu; Auto on host tensors,
// the reference for fp64) run each sequence's backward with the mask of its
// own lengths; rows of sequences without queries get zero dk and dv. The
// CUDA backend has no varlen backward yet: it is refused with an error.
void validate_attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                        const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                        const AttentionGrads& grads, const VarlenBatch& batch,
                                        const BlockMask& mask, const TensorView* d_lse);

void attention_varlen_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse, const TensorView& d_out,
                               const AttentionGrads& grads, const VarlenBatch& batch, const BlockMask& mask,
                               const AttentionOptions& options = {}, const TensorView* d_lse = nullptr);

// ---- backends (called by attention_backward() after validation) ----

void reference_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const TensorView& lse, const TensorView& d_out,
                                  const AttentionGrads& grads, const BlockMask& mask, double scale,
                                  const TensorView* d_lse);

void cpu_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const TensorView& lse, const TensorView& d_out,
                            const AttentionGrads& grads, const BlockMask& mask, double scale,
                            const TensorView* d_lse);

}  // namespace spattn
