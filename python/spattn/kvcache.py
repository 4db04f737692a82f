"""spattn.attention_with_kvcache: attention over a KV cache, paged or contiguous, new keys appended first.

FlashAttention's convention (``flash_attn_with_kvcache``), with a sparse
pattern on top: the pattern of ``mask`` is applied at each sequence's own
lengths with key blocks of one page, and a paged call reads only the pages
the pattern keeps (a streaming or sliding-window decode never touches the
middle pages, whose page-table entries may then be -1). CPU tensors run on
the fp64 reference (float64) or the fast CPU backend; CUDA tensors (float16,
bfloat16) on the CUDA decode kernels, which read the cache lengths, page table
and chosen pages on the device, so a decode step can be captured in a CUDA
graph (docs/python.md).
"""
from __future__ import annotations

import numbers
from typing import Optional

import torch

from spattn._ops import ops
from spattn.attention import _DTYPES, _check_options, _mask_on
from spattn.block_mask import BlockMask


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
                           mask: Optional[BlockMask] = None, pages: Optional[torch.Tensor] = None,
                           page_min: Optional[torch.Tensor] = None, page_max: Optional[torch.Tensor] = None,
                           scale: Optional[float] = None, return_lse: bool = False, backend: str = "auto"):
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
    lengths; None means dense. ``pages`` (B, Hkv, n) int32, instead of a
    mask (Quest decoding, from ``select_pages``): each query head attends,
    causally, to the keys of its kv head's chosen logical pages (-1: an
    unused slot) and of the pages the new keys land in. ``page_min``,
    ``page_max`` (num_pages, Hkv, D) float32, optional: the key summaries
    ``select_pages`` reads, updated in place by the append. Returns ``out``
    (B, Lq, Hq, D), or ``(out, lse)`` with lse (B, Hq, Lq) float32.

    On CUDA every tensor argument lies on q's device; a bad length or page
    entry raises a ValueError after the kernels ran (the call waits for
    them), except inside a CUDA graph capture, where nothing waits and a bad
    sequence's rows come out NaN.
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
    for name, t in (("cache_seqlens", cache_seqlens), ("page_table", page_table), ("pages", pages),
                    ("page_min", page_min), ("page_max", page_max)):
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if mask is not None and not isinstance(mask, BlockMask):
        raise TypeError(f"mask must be a spattn.BlockMask or None, got {type(mask).__name__}")
    packed = None if mask is None else _mask_on(mask, q.device)
    out, lse = ops.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, page_table, packed, pages,
                                          page_min, page_max, None if scale is None else float(scale), backend)
    return (out, lse) if return_lse else out


def page_summaries(k_cache: torch.Tensor, cache_seqlens, page_table: torch.Tensor):
    """(page_min, page_max), each (num_pages, Hkv, D) float32: the elementwise min and max of the keys each
    page of the sequences holds (the cached keys only; pages no sequence uses stay 0). Made once for a
    filled cache; ``attention_with_kvcache`` keeps them up to date on append."""
    _check_blhd("k_cache", k_cache)
    num_pages, page_size, kv_heads, dim = k_cache.shape
    page_min = torch.zeros(num_pages, kv_heads, dim, dtype=torch.float32, device=k_cache.device)
    page_max = torch.zeros_like(page_min)
    lengths = torch.as_tensor(cache_seqlens).tolist()
    for b, length in enumerate(lengths):
        for logical in range(-(-int(length) // page_size)):
            page = int(page_table[b, logical])
            rows = k_cache[page, :min(page_size, int(length) - logical * page_size)].float()
            page_min[page], page_max[page] = rows.amin(0), rows.amax(0)
    return page_min, page_max


def select_pages(q: torch.Tensor, page_min: torch.Tensor, page_max: torch.Tensor, cache_seqlens: torch.Tensor,
                 page_table: torch.Tensor, *, page_size: int, topk: int, sink_pages: int = 1,
                 local_pages: int = 1) -> torch.Tensor:
    """The ``topk`` logical pages per (sequence, kv head) with the highest Quest bound, as ``pages`` for
    ``attention_with_kvcache``: (B, Hkv, topk) int32, sorted, -1 in unused slots.

    A page's bound for a query is sum_d max(q_d * min_d, q_d * max_d), an upper bound of q . k over its keys
    (Quest, Tang et al. 2024), taken as the largest over the query rows and the query heads of the kv head.
    Of each sequence's ceil(cache_seqlens / page_size) pages, the first ``sink_pages`` and the last
    ``local_pages`` are always chosen. Tensor operations only (no host synchronisation), on q's device.
    """
    for name, value, least in (("page_size", page_size, 1), ("topk", topk, 1), ("sink_pages", sink_pages, 0),
                               ("local_pages", local_pages, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    _check_blhd("q", q)
    B, Lq, Hq, D = q.shape
    if page_min.dim() != 3 or page_min.shape != page_max.shape or page_min.shape[2] != D:
        raise ValueError(f"page_min and page_max must be (num_pages, Hkv, {D}), got {tuple(page_min.shape)} and "
                         f"{tuple(page_max.shape)}")
    Hkv = page_min.shape[1]
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"q heads ({Hq}) must be a multiple of the summaries' kv heads ({Hkv})")
    if not isinstance(page_table, torch.Tensor) or page_table.dim() != 2 or page_table.shape[0] != B:
        raise ValueError(f"page_table must be a (batch, max_pages) = ({B}, max_pages) tensor")
    max_pages = page_table.shape[1]
    lengths = torch.as_tensor(cache_seqlens, device=q.device).to(torch.int64).reshape(B, 1)
    used = (lengths + page_size - 1) // page_size  # pages per sequence
    logical = torch.arange(max_pages, device=q.device).reshape(1, max_pages)
    # The bound of every (sequence, logical page, kv head): the summaries through the page table, the
    # largest over the rows and query heads of the kv head.
    lo = page_min[page_table.to(torch.int64).clamp_min(0)].float()  # (B, max_pages, Hkv, D)
    hi = page_max[page_table.to(torch.int64).clamp_min(0)].float()
    # sum_d max(q_d lo_d, q_d hi_d) = q+ . hi + q- . lo (q+ = max(q, 0), q- = min(q, 0)): two matrix products.
    qg = q.float().reshape(B, Lq, Hkv, Hq // Hkv, D).permute(0, 2, 1, 3, 4).reshape(B, Hkv, -1, D)
    bound = (torch.einsum("bgrd,bpgd->bgpr", qg.clamp_min(0), hi)
             + torch.einsum("bgrd,bpgd->bgpr", qg.clamp_max(0), lo))
    score = bound.amax(dim=-1).transpose(1, 2)  # (B, max_pages, Hkv)
    forced = (logical < sink_pages) | (logical >= used - local_pages)
    score = torch.where(forced.unsqueeze(-1), torch.full_like(score, float("inf")), score)
    score = torch.where((logical < used).unsqueeze(-1), score, torch.full_like(score, float("-inf")))
    k = min(topk, max_pages)
    best, chosen = score.topk(k, dim=1)  # (B, k, Hkv)
    chosen = torch.where(best > float("-inf"), chosen, torch.full_like(chosen, max_pages))
    chosen = chosen.sort(dim=1).values
    chosen = torch.where(chosen == max_pages, torch.full_like(chosen, -1), chosen)
    pages = torch.full((B, Hkv, topk), -1, dtype=torch.int32, device=q.device)
    pages[:, :, :k] = chosen.transpose(1, 2).to(torch.int32)
    return pages
