"""Gradients of the spattn operators.

``spattn::attention`` differentiates through ``spattn::attention_backward``
(spattn/backward.hpp, on the host and CUDA backends) with respect to q, k
and v, given the gradients of both outputs; the mask is a constant. Its
autograd kernel is C++ (python/csrc/attention_autograd.cpp), so a call runs
no Python past the argument checks; ``attention_backward``'s fake kernel for
torch.compile is here. ``spattn::attention_varlen`` differentiates through
``spattn::attention_varlen_backward`` on CPU tensors (each sequence alone).
For ``dynamic_attention`` the selection is not differentiated, as in top-k
sparse attention generally. The operators without a backward pass yet, the
varlen operator on CUDA tensors and the fused device ``dynamic_attention``,
raise when a gradient reaches them instead of leaving ``.grad`` silently empty; their forward runs
as before, so inference with tensors that require grad is unaffected.
"""
import torch

from spattn._ops import ops


class GradientNotImplementedError(NotImplementedError):
    """A gradient was asked of an operator that has no backward pass for these tensors yet."""


def _no_gradient(what: str):
    raise GradientNotImplementedError(
        f"{what} has no backward pass yet, so gradients cannot flow through it; call it under "
        "torch.no_grad() (or on tensors that do not require grad), or use spattn.attention, which has one")


def _attention_backward_fake(d_out, d_lse, q, k, v, out, lse, mask, scale, backend):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _save_nothing(ctx, inputs, output):
    pass


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, scale, backend = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, mask)
    ctx.max_seqlen_q, ctx.max_seqlen_k, ctx.scale, ctx.backend = max_seqlen_q, max_seqlen_k, scale, backend


def _varlen_backward(ctx, d_out, d_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, mask = ctx.saved_tensors
    if q.is_cuda:
        _no_gradient("spattn.attention_varlen on CUDA tensors (the CPU tensors have one)")
    if d_out is None:
        d_out = torch.zeros_like(out)
    if d_lse is None:
        d_lse = torch.zeros_like(lse)
    dq, dk, dv = ops.attention_varlen_backward(d_out, d_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                                               ctx.max_seqlen_q, ctx.max_seqlen_k, mask, ctx.scale, ctx.backend)
    return dq, dk, dv, None, None, None, None, None, None, None


def _varlen_backward_fake(d_out, d_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                          mask, scale, backend):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _dynamic_backward(ctx, d_out, d_lse):
    _no_gradient("spattn.dynamic_attention on CUDA tensors")


torch.library.register_fake("spattn::attention_backward")(_attention_backward_fake)
torch.library.register_fake("spattn::attention_varlen_backward")(_varlen_backward_fake)
torch.library.register_autograd("spattn::attention_varlen", _varlen_backward, setup_context=_varlen_setup)
torch.library.register_autograd("spattn::dynamic_attention", _dynamic_backward, setup_context=_save_nothing)
