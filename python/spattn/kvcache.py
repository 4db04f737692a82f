"""spattn.attention_with_kvcache: attention over a KV cache, paged or contiguous, new keys appended first.

FlashAttention's convention (``flash_attn_with_kvcache``), with a sparse
pattern on top: the pattern of ``mask`` is applied at each sequence's own
lengths with key blocks of one page, and a paged call reads only the pages
the pattern keeps (a streaming or sliding-window decode never touches the
middle pages, whose page-table entries may then be -1). CPU tensors for now
(the fp64 reference for float64, else the fast CPU backend); CUDA tensors are
refused with an error until the device path lands.
"""
from __future__ import annotations

import numbers
from typing import Optional

import torch

from spattn._ops import ops
from spattn.attention import _check_options, _mask_on
from spattn.block_mask import BlockMask

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_blhd(name: str, t, dtype=None, device=None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 4:
        raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
    if dtype is None and t.dtype not in _DTYPES:
        raise TypeError(f"{name} dtype must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if dtype is not None and t.dtype != dtype:
        raise TypeError(f"{name} dtype ({t.dtype}) must equal q dtype ({dtype})")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device} but q is on {device}")


def attention_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           k: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None, *,
                           cache_seqlens, page_table: Optional[torch.Tensor] = None,
                           mask: Optional[BlockMask] = None, scale: Optional[float] = None,
                           return_lse: bool = False, backend: str = "auto"):
    """Attention of new queries over a KV cache, after appending new keys to it in place.

    q (B, Lq, Hq, D): each sequence's last Lq positions (Lq = 1 for a decode
    step, more for a chunk of prefill or speculative tokens), bottom-right
    aligned as in ``attention``. ``k_cache``, ``v_cache``: (num_pages,
    page_size, Hkv, D) with ``page_table`` (B, max_pages) int32, the physical
    page of each logical page; or contiguous (B, Lk_max, Hkv, D) without it.
    ``cache_seqlens``: int32 (B) tensor or an int, the keys already cached per
    sequence. ``k``, ``v`` (B, L_new, Hkv, D), optional: written at positions
    ``cache_seqlens .. + L_new`` before attending (the caller advances
    ``cache_seqlens``, as with FlashAttention). ``mask``: a BlockMask from
    ``spattn.patterns`` of a prefix-stable pattern (every pattern but
    bigbird and custom), any length: its pattern is used at each sequence's
    lengths; None means dense. Returns ``out`` (B, Lq, Hq, D), or ``(out,
    lse)`` with lse (B, Hq, Lq) float32.
    """
    _check_blhd("q", q)
    _check_blhd("k_cache", k_cache, q.dtype, q.device)
    _check_blhd("v_cache", v_cache, q.dtype, q.device)
    if (k is None) != (v is None):
        raise ValueError("k and v (the new keys and values) come together: give both or neither")
    if k is not None:
        _check_blhd("k", k, q.dtype, q.device)
        _check_blhd("v", v, q.dtype, q.device)
    _check_options(scale, backend, return_lse)
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        cache_seqlens = torch.full((q.shape[0],), int(cache_seqlens), dtype=torch.int32, device=q.device)
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(f"cache_seqlens must be an int or a torch.int32 tensor, got {type(cache_seqlens).__name__}")
    for name, t in (("cache_seqlens", cache_seqlens), ("page_table", page_table)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if mask is not None and not isinstance(mask, BlockMask):
        raise TypeError(f"mask must be a spattn.BlockMask or None, got {type(mask).__name__}")
    if q.is_cuda:
        raise ValueError("attention_with_kvcache: CUDA tensors have no KV-cache kernel yet; the CPU backends "
                         "have one (spattn.attention runs a decode step over a contiguous CUDA cache)")
    packed = None if mask is None else _mask_on(mask, q.device)
    out, lse = ops.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, packed,
                                          None if scale is None else float(scale), backend)
    return (out, lse) if return_lse else out
