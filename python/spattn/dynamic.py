"""Dynamic block-sparse attention: the key blocks chosen from q and k at run time.

``select_blocks`` estimates how much softmax mass each (query block, key
block) pair carries and keeps, per query block, the key blocks that carry most
of it (docs/dynamic.md): mean-pooled q . mean-pooled k (or antidiagonal
samples with ``stride``), a row softmax over the allowed key blocks, then the
forced sink and local blocks plus the best others until ``topk`` blocks or a
mass of ``tau``, within ``min_blocks`` / ``max_blocks``. The selection runs in
the C++ library: on the host (``spattn::select_blocks_batched``), or for
CUDA tensors on the device (the ``spattn::select_blocks_device`` operator,
``spattn::CudaSelector``). ``dynamic_attention`` selects, then runs
``spattn.attention`` with each batch element's mask; on CUDA tensors with
blocks that fit the fused kernel's tile it runs the
``spattn::dynamic_attention`` operator instead, which selects and attends on
the device with no host synchronisation (spattn::CudaDynamicAttention) and
can be compiled and captured in a CUDA graph.
"""
from __future__ import annotations

import math
import numbers
from typing import List, Optional

import torch

from spattn._ops import ops
from spattn._pattern import Pattern
from spattn.attention import (_HAS_CUDA, _check_options as check_options, _check_tensors as check_tensors,
                              attention)
from spattn.block_mask import BlockMask, BlockSize, block_size_pair, int_at_least

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The fused CUDA kernel's tile (query rows, keys): the device path needs
# block_q and block_k multiples of it (docs/dynamic.md).
_FUSED_TILE = (128, 64)


def _check_qk(q, k) -> None:
    for name, t in (("q", q), ("k", k)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seq_len, head_dim), "
                             f"got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} dtype must be float16, bfloat16, float32 or float64, got {t.dtype}")
        if t.numel() == 0:
            raise ValueError(f"{name} must have every dimension >= 1, got shape {tuple(t.shape)}")
    if k.dtype != q.dtype:
        raise TypeError(f"k dtype ({k.dtype}) must equal q dtype ({q.dtype})")
    if k.device != q.device:
        raise ValueError(f"k is on {k.device} but q is on {q.device}")
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k batch ({k.shape[0]}) must equal q batch ({q.shape[0]})")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"q heads ({q.shape[1]}) must be a multiple of k heads ({k.shape[1]})")
    if k.shape[3] != q.shape[3]:
        raise ValueError(f"k head_dim ({k.shape[3]}) must equal q head_dim ({q.shape[3]})")


def _optional_real(value, name: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number or None, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def _check_bool(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _select_args(topk, tau, block_size, sink_blocks, local_blocks, min_blocks, max_blocks, stride, causal,
                 per_query_head, scale):
    """The operator's arguments after the tensors; errors name the Python argument."""
    if (topk is None) == (tau is None):
        raise ValueError(f"exactly one of topk and tau must be given, got topk={topk!r}, tau={tau!r}")
    if topk is not None:
        topk = int_at_least(topk, "topk", 1)
    else:
        tau = _optional_real(tau, "tau")
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
    block_q, block_k = block_size_pair(block_size)
    sink_blocks = int_at_least(sink_blocks, "sink_blocks", 0)
    local_blocks = int_at_least(local_blocks, "local_blocks", 0)
    min_blocks = int_at_least(min_blocks, "min_blocks", 0)
    max_blocks = int_at_least(max_blocks, "max_blocks", 0)
    stride = int_at_least(stride, "stride", 0)
    if stride > min(block_q, block_k):
        raise ValueError(f"stride must be <= the block size {(block_q, block_k)}, got {stride}")
    return (block_q, block_k, topk, tau, min_blocks, max_blocks, sink_blocks, local_blocks,
            _check_bool(causal, "causal"), stride, _check_bool(per_query_head, "per_query_head"),
            _optional_real(scale, "scale"))


def select_blocks_batched(q: torch.Tensor, k: torch.Tensor, *, topk: Optional[int] = None,
                          tau: Optional[float] = None, block_size: BlockSize = 128, sink_blocks: int = 1,
                          local_blocks: int = 2, min_blocks: int = 0, max_blocks: int = 0, stride: int = 0,
                          causal: bool = False, per_query_head: bool = False,
                          scale: Optional[float] = None) -> List[BlockMask]:
    """One ``BlockMask`` per batch element of q (B, Hq, Lq, D) and k (B, Hkv, Lk, D).

    Keywords as ``spattn::SelectConfig`` and ``spattn run --pattern topk``:
    exactly one of ``topk`` (blocks kept per query block, forced ones included)
    and ``tau`` (softmax mass to reach, in (0, 1]; 1 keeps every allowed block);
    ``block_size`` an int or ``(block_q, block_k)``; ``sink_blocks`` first key
    blocks and ``local_blocks`` blocks ending at the diagonal always kept;
    ``min_blocks`` / ``max_blocks`` (0 = no limit) budgets per row; ``stride``
    0 for mean pooling or S >= 1 for antidiagonal sampling; ``causal``;
    ``per_query_head`` for one selection per query head (default: one per kv
    head, probabilities averaged over its query heads); ``scale`` of the block
    scores, default 1/sqrt(D). Each mask has Hkv heads (Hq with
    ``per_query_head``) and lives on the device of q.

    On CUDA tensors (fp16, bf16 or fp32) the selection runs on the device
    in fp32 (``spattn::select_blocks_device``): its kernels and the copies of
    the masks' arrays are queued on the current stream, then one copy of the
    B kept-block counts to the host (the only synchronisation) sizes each
    mask's ``kv_indices`` and ``kv_full``, which are views of the operator's
    outputs. A row whose choice hangs on a near tie may differ from the
    host's fp64 selection (docs/dynamic.md). Host tensors and fp64 CUDA
    tensors select on the host (the latter copied there and the masks moved
    back).
    """
    _check_qk(q, k)
    args = _select_args(topk, tau, block_size, sink_blocks, local_blocks, min_blocks, max_blocks, stride,
                        causal, per_query_head, scale)
    block_q, block_k = args[0], args[1]
    if q.is_cuda and _HAS_CUDA and q.dtype != torch.float64:
        offsets, indices, full, *encoded = ops.select_blocks_device(q.detach(), k.detach(), *args)
        pattern = Pattern.from_op(encoded)
        kept = offsets[:, -1].tolist()  # the synchronisation: B counts to the host
        return [BlockMask(q.shape[2], k.shape[2], (block_q, block_k), offsets[b], indices[b, :n], full[b, :n],
                          pattern, head_dependent=False) for b, n in enumerate(kept)]
    host_q, host_k = q.detach().cpu(), k.detach().cpu()
    offsets, indices, full, *encoded = ops.select_blocks(host_q, host_k, *args)
    pattern = Pattern.from_op(encoded)
    masks = []
    for row_offsets, kv_indices, kv_full in zip(offsets, indices, full):
        mask = BlockMask(q.shape[2], k.shape[2], (block_q, block_k), row_offsets, kv_indices, kv_full,
                         pattern, head_dependent=False)
        masks.append(mask.to(q.device))
    return masks


def select_blocks(q: torch.Tensor, k: torch.Tensor, *, topk: Optional[int] = None,
                  tau: Optional[float] = None, block_size: BlockSize = 128, sink_blocks: int = 1,
                  local_blocks: int = 2, min_blocks: int = 0, max_blocks: int = 0, stride: int = 0,
                  causal: bool = False, per_query_head: bool = False,
                  scale: Optional[float] = None) -> BlockMask:
    """The ``BlockMask`` chosen for q (1, Hq, Lq, D) and k (1, Hkv, Lk, D).

    Keywords as ``select_blocks_batched``; the batch must be 1 (use
    ``select_blocks_batched`` for one mask per batch element). The mask is
    usable with ``spattn.attention(q, k, v, mask)``.
    """
    if isinstance(q, torch.Tensor) and q.dim() == 4 and q.shape[0] != 1:
        raise ValueError(f"q batch must be 1 for select_blocks, got {q.shape[0]}; use "
                         "select_blocks_batched for one mask per batch element")
    return select_blocks_batched(q, k, topk=topk, tau=tau, block_size=block_size, sink_blocks=sink_blocks,
                                 local_blocks=local_blocks, min_blocks=min_blocks, max_blocks=max_blocks,
                                 stride=stride, causal=causal, per_query_head=per_query_head, scale=scale)[0]


def _on_device(q, select_args, return_masks, backend) -> bool:
    """Can select-then-attend run in the device operator (no host copy of the masks)?"""
    block_q, block_k = select_args[0], select_args[1]
    return (q.is_cuda and _HAS_CUDA and backend in ("auto", "cuda") and not return_masks
            and block_q % _FUSED_TILE[0] == 0 and block_k % _FUSED_TILE[1] == 0)


def dynamic_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, topk: Optional[int] = None,
                      tau: Optional[float] = None, block_size: BlockSize = 128, sink_blocks: int = 1,
                      local_blocks: int = 2, min_blocks: int = 0, max_blocks: int = 0, stride: int = 0,
                      causal: bool = False, per_query_head: bool = False, scale: Optional[float] = None,
                      return_lse: bool = False, return_masks: bool = False, backend: str = "auto"):
    """Selects the blocks of each batch element from q and k, then attends over them.

    The selection keywords are those of ``select_blocks_batched``; ``scale``
    serves both the block scores and the attention (default 1/sqrt(D)), and
    ``return_lse`` and ``backend`` are those of ``spattn.attention``. Returns
    ``out``, with ``(out, lse)`` for ``return_lse`` and the list of masks
    appended for ``return_masks``. Batch element b equals
    ``spattn.attention(q[b:b+1], k[b:b+1], v[b:b+1], masks[b])``.

    On CUDA tensors with ``block_q`` a multiple of 128 and
    ``block_k`` of 64, without ``return_masks`` and with backend ``auto`` or
    ``cuda``, selection and attention run on the device in one operator
    (``spattn::dynamic_attention``): no host synchronisation, usable under
    torch.compile and in CUDA graphs (its buffers are made by the first call
    with a configuration and shape, which must precede a capture). The
    device selection scores in fp32, the host one in fp64: a block whose
    choice hangs on a near tie may differ (docs/dynamic.md). Otherwise
    ``select_blocks_batched`` selects (on the device for CUDA tensors) and
    the attention runs where the tensors are.
    """
    check_tensors(q, k, v)
    _check_bool(return_masks, "return_masks")
    check_options(scale, backend, return_lse)
    _check_qk(q, k)
    args = _select_args(topk, tau, block_size, sink_blocks, local_blocks, min_blocks, max_blocks, stride,
                        causal, per_query_head, scale)
    if _on_device(q, args, return_masks, backend):
        out, lse = ops.dynamic_attention(q, k, v, *args)
        return (out, lse) if return_lse else out
    masks = select_blocks_batched(q, k, topk=topk, tau=tau, block_size=block_size, sink_blocks=sink_blocks,
                                  local_blocks=local_blocks, min_blocks=min_blocks, max_blocks=max_blocks,
                                  stride=stride, causal=causal, per_query_head=per_query_head, scale=scale)
    out = torch.empty_like(q)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    for b, mask in enumerate(masks):
        out_b, lse_b = attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], mask, scale=scale, return_lse=True,
                                 backend=backend)
        out[b:b + 1].copy_(out_b)
        lse[b:b + 1].copy_(lse_b)
    result = (out, lse) if return_lse else (out,)
    if return_masks:
        result = result + (masks,)
    return result if len(result) > 1 else result[0]
