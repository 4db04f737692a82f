"""spattn.attention: exact softmax attention restricted to a BlockMask.

Shapes as ``torch.nn.functional.scaled_dot_product_attention``: q (B, Hq, Lq, D),
k and v (B, Hkv, Lk, D) with Hq % Hkv == 0 (GQA: query head h reads kv head
h // (Hq // Hkv)). Any strides are read as they are, so ``x.transpose(1, 2)``
of a (B, L, H, D) tensor is used without a copy; the output has the strides
of q. Query row i sits at position i + (Lk - Lq) (bottom-right alignment);
a row with no allowed key gives 0 and LSE -inf.

The inputs are checked here, with errors naming the argument, before the
``spattn::attention`` operator runs; the checks read only metadata, so they
also run while torch.compile traces (no graph break).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

import torch

from spattn._ops import built_with_cuda, ops
from spattn.block_mask import BlockMask

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BACKENDS = ("auto", "reference", "cpu", "cuda")
_HAS_CUDA = built_with_cuda()


def _well_formed(q, k, v) -> bool:
    """The common case in a few metadata reads; _check_tensors names what is wrong otherwise."""
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and isinstance(v, torch.Tensor)):
        return False
    qs, ks = q.shape, k.shape
    return (len(qs) == 4 and len(ks) == 4 and ks == v.shape and qs[0] == ks[0] and qs[3] == ks[3]
            and qs[3] > 0 and ks[1] > 0 and qs[1] % ks[1] == 0 and q.dtype in _DTYPES
            and q.dtype == k.dtype == v.dtype and q.device == k.device == v.device
            and (_HAS_CUDA or not q.is_cuda))


def _check_tensors(q, k, v) -> None:
    if _well_formed(q, k, v):
        return
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"{name} dtype must be float16, bfloat16, float32 or float64, got {t.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} dtype ({t.dtype}) must equal q dtype ({q.dtype})")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    B, Hq, _, D = q.shape
    if k.shape[0] != B or v.shape[0] != B:
        raise ValueError(f"batch sizes differ: q {B}, k {k.shape[0]}, v {v.shape[0]}")
    if v.shape[1] != k.shape[1]:
        raise ValueError(f"v heads ({v.shape[1]}) must equal k heads ({k.shape[1]})")
    if k.shape[1] == 0 or Hq % k.shape[1]:
        raise ValueError(f"q heads ({Hq}) must be a multiple of k heads ({k.shape[1]})")
    if v.shape[2] != k.shape[2]:
        raise ValueError(f"v seq_len ({v.shape[2]}) must equal k seq_len ({k.shape[2]})")
    if k.shape[3] != D or v.shape[3] != D:
        raise ValueError(f"head_dim differs: q {D}, k {k.shape[3]}, v {v.shape[3]}")
    if D == 0:
        raise ValueError("head_dim must be >= 1, got 0")
    if q.is_cuda and not _HAS_CUDA:
        raise ValueError("q is a CUDA tensor but spattn was built without CUDA; reinstall it on a "
                         "machine with a GPU (or with SPATTN_CUDA=ON)")


def _mask_on(mask, device):
    """The mask's packed tensor on `device`, where the operators read it (a mask used on another
    device is moved once and kept with the mask)."""
    if not isinstance(mask, BlockMask):
        raise TypeError(f"mask must be a spattn.BlockMask or None, got {type(mask).__name__}")
    return mask._on(device).packed


def _check_mask(mask: BlockMask, q, k) -> None:
    Lq, Lk, Hq = q.shape[2], k.shape[2], q.shape[1]
    if (mask.q_len, mask.k_len) != (Lq, Lk):
        raise ValueError(f"mask was built for Lq={mask.q_len}, Lk={mask.k_len} but q has seq_len {Lq} "
                         f"and k has seq_len {Lk}")
    if mask.head_dependent and mask.num_heads != Hq:
        raise ValueError(f"mask was built for {mask.num_heads} query heads (its pattern depends on the "
                         f"head) but q has {Hq}; build it with num_heads={Hq}")
    if Hq % mask.num_heads:
        raise ValueError(f"mask has {mask.num_heads} heads, which must divide q heads ({Hq})")


def _check_options(scale, backend, return_lse) -> None:
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
        if not math.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale}")
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(_BACKENDS)}, got {backend!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {type(return_lse).__name__}")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[BlockMask] = None, *,
              scale: Optional[float] = None, return_lse: bool = False, backend: str = "auto"):
    """Softmax attention over the pairs `mask` allows (every pair when mask is None).

    Returns ``out`` (B, Hq, Lq, D) in the dtype of q, or ``(out, lse)`` with
    ``return_lse=True``, lse (B, Hq, Lq) float32, natural log. ``scale``
    defaults to 1/sqrt(D). ``backend``: "auto" (CUDA for CUDA tensors, the
    fast CPU kernel for CPU tensors, the exact fp64 reference for float64
    CPU tensors), or "reference", "cpu", "cuda" to choose.
    """
    _check_tensors(q, k, v)
    _check_options(scale, backend, return_lse)
    packed = None
    if mask is not None:
        packed = _mask_on(mask, q.device)
        _check_mask(mask, q, k)
    out, lse = ops.attention(q, k, v, packed, None if scale is None else float(scale), backend)
    return (out, lse) if return_lse else out


def _check_offsets(cu, name: str, device) -> None:
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(cu).__name__}")
    if cu.dtype != torch.int32:
        raise TypeError(f"{name} dtype must be torch.int32, got {cu.dtype}")
    if cu.dim() != 1 or cu.numel() < 1:
        raise ValueError(f"{name} must be 1-D with batch + 1 >= 1 entries, got shape {tuple(cu.shape)}")
    if cu.device != device:
        raise ValueError(f"{name} is on {cu.device} but q is on {device}")


def _check_max_seqlen(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                     mask: Optional[BlockMask] = None, *, scale: Optional[float] = None,
                     return_lse: bool = False, backend: str = "auto"):
    """Attention over a packed batch of variable-length sequences (FlashAttention's varlen API).

    q (total_q, Hq, D), k and v (total_k, Hkv, D): sequence b owns rows
    ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``
    of k and v, and attends only to itself; ``cu_seqlens_*`` are int32
    (batch + 1) prefix sums on the device of q, no sequence has more queries
    than keys (with fewer, its queries are its last positions, bottom-right
    aligned as in ``attention``: a chunk after cached keys), and
    ``max_seqlen_*`` bound the lengths. ``mask`` is built once for the longest
    key sequence, e.g. ``spattn.patterns.causal(max_seqlen_k)``,
    from a pattern whose mask for a shorter sequence is the corner of the long
    one (every pattern except bigbird and custom); each sequence gets the
    pattern at its own length. None means dense. Returns ``out`` (total_q,
    Hq, D), or ``(out, lse)`` with lse (Hq, total_q) float32.

    CPU tensors: cu_seqlens are checked (start at 0, never decrease, end at
    total, lengths <= max_seqlen, Lq <= Lk per sequence). CUDA tensors: the
    kernel reads them on the device without a synchronisation, so their
    validity is the caller's contract, as in FlashAttention.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, torch.Tensor) and t.dim() != 3:
            raise ValueError(f"{name} must be 3-D (total, heads, head_dim), got shape {tuple(t.shape)}")
    _check_tensors(*(t.unsqueeze(0).transpose(1, 2) if isinstance(t, torch.Tensor) else t for t in (q, k, v)))
    _check_options(scale, backend, return_lse)
    _check_offsets(cu_seqlens_q, "cu_seqlens_q", q.device)
    _check_offsets(cu_seqlens_k, "cu_seqlens_k", q.device)
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(f"cu_seqlens_q has {cu_seqlens_q.numel()} entries but cu_seqlens_k has "
                         f"{cu_seqlens_k.numel()}")
    max_q = _check_max_seqlen(max_seqlen_q, "max_seqlen_q")
    max_k = _check_max_seqlen(max_seqlen_k, "max_seqlen_k")
    scale_arg = None if scale is None else float(scale)
    packed = None
    if mask is not None:
        packed = _mask_on(mask, q.device)
        if mask.q_len != mask.k_len or mask.q_len < max(max_q, max_k):
            raise ValueError(f"mask must be built for one length >= max_seqlen_q and max_seqlen_k "
                             f"({max_q}, {max_k}), got Lq={mask.q_len}, Lk={mask.k_len}")
        Hq = q.shape[1]
        if mask.head_dependent and mask.num_heads != Hq:
            raise ValueError(f"mask was built for {mask.num_heads} query heads (its pattern depends on the "
                             f"head) but q has {Hq}; build it with num_heads={Hq}")
    out, lse = ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k, packed, scale_arg, backend)
    return (out, lse) if return_lse else out
