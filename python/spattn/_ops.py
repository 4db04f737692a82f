"""Loads the compiled spattn operators and registers their fake kernels.

The shared library next to this file (built from python/csrc) registers the
``torch.ops.spattn.*`` operators through ``TORCH_LIBRARY``. ``attention``,
``attention_varlen`` and ``dynamic_attention`` (CUDA only) are the operators
meant for traced code: their fake kernels below give torch.compile the output
metadata (out with the strides of q; lse fp32 (B, Hq, Lq), or (Hq, total_q)
for varlen) without running anything. The other operators build patterns and
masks on the host and run eagerly.
"""
from pathlib import Path

import torch

_LIBRARY = Path(__file__).with_name("_spattn_ops.so")
if not _LIBRARY.exists():
    raise ImportError(
        f"spattn: the compiled operators {_LIBRARY} are missing; install the package with "
        "`pip install --no-build-isolation .` from the repository root"
    )
torch.ops.load_library(str(_LIBRARY))

ops = torch.ops.spattn


@torch.library.register_fake("spattn::attention")
def _attention_fake(q, k, v, mask, scale, backend):
    out = torch.empty_like(q)
    lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return out, lse


@torch.library.register_fake("spattn::attention_varlen")
def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, mask, scale, backend):
    out = torch.empty_like(q)
    lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    return out, lse


@torch.library.register_fake("spattn::dynamic_attention")
def _dynamic_attention_fake(q, k, v, block_q, block_k, topk, tau, min_blocks, max_blocks, sink_blocks,
                            local_blocks, causal, stride, per_query_head, scale):
    out = torch.empty_like(q)
    lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return out, lse


def built_with_cuda() -> bool:
    """True when the operators have a CUDA kernel (the package was built with CUDA)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("spattn::attention", "CUDA")
