"""spattn.patterns: one function per sparse-attention pattern, each returning a BlockMask.

Every function takes the query length, optionally a different key length, and
keyword parameters named as the ``spattn`` command line names them; the rule
of each pattern is in docs/patterns.md. Lengths may be 0: the mask then has
no query rows (Lq = 0) or rows that keep no key (Lk = 0). Query row i sits at position
p = i + (Lk - Lq) (bottom-right alignment, as FlashAttention). Common keywords:

- ``block_size``: mask block size, an int or (block_q, block_k) (default 128);
- ``num_heads``: query heads; required by patterns that read the head index
  (dilated with rates > 1, ``per_head`` mixes), whose masks get one head each
  (a ValueError says so where it is missing); other patterns ignore it;
- ``device``: where the mask's arrays go (default CPU).

``union``, ``intersection`` and ``per_head`` combine masks built for the same
lengths and block sizes; ``a | b`` and ``a & b`` do the same.
"""
from __future__ import annotations

from typing import Optional, Sequence

from spattn._ops import ops
from spattn._pattern import Pattern
from spattn.block_mask import BlockMask, BlockSize, block_size_pair, combine, int_at_least
from spattn.block_mask import per_head as _per_head

__all__ = [
    "dense", "causal", "block_diagonal", "sliding_window", "streaming", "strided", "fixed",
    "dilated", "bigbird", "longformer", "custom", "union", "intersection", "per_head",
]


def _int_list(values, name: str, minimum: int) -> list:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    return [int_at_least(v, f"{name}[{n}]", minimum) for n, v in enumerate(values)]


def _mask(pattern_op, seq_len: int, seq_len_k: Optional[int], block_size: BlockSize,
          num_heads: Optional[int], device) -> BlockMask:
    q_len = int_at_least(seq_len, "seq_len", 0)
    k_len = q_len if seq_len_k is None else int_at_least(seq_len_k, "seq_len_k", 0)
    return BlockMask.from_pattern(Pattern.from_op(pattern_op), q_len, k_len, block_size,
                                  num_heads=num_heads, device=device)


def dense(seq_len: int, seq_len_k: Optional[int] = None, *, causal: bool = False,
          block_size: BlockSize = 128, num_heads: Optional[int] = None, device=None) -> BlockMask:
    """Every pair (with ``causal``: j <= p)."""
    return _mask(ops.pattern_dense(bool(causal)), seq_len, seq_len_k, block_size, num_heads, device)


def causal(seq_len: int, seq_len_k: Optional[int] = None, *, block_size: BlockSize = 128,
           num_heads: Optional[int] = None, device=None) -> BlockMask:
    """j <= p."""
    return _mask(ops.pattern_dense(True), seq_len, seq_len_k, block_size, num_heads, device)


def block_diagonal(seq_len: int, seq_len_k: Optional[int] = None, *, diagonal_block: Optional[int] = None,
                   causal: bool = False, block_size: BlockSize = 128, num_heads: Optional[int] = None,
                   device=None) -> BlockMask:
    """floor(p / B) == floor(j / B) with B = ``diagonal_block`` (default: the key block size)."""
    if diagonal_block is None:
        block = block_size_pair(block_size)[1]
    else:
        block = int_at_least(diagonal_block, "diagonal_block", 1)
    return _mask(ops.pattern_block_diagonal(block, bool(causal)), seq_len, seq_len_k, block_size,
                 num_heads, device)


def sliding_window(seq_len: int, seq_len_k: Optional[int] = None, *, window: Optional[int] = None,
                   window_left: Optional[int] = None, window_right: Optional[int] = None,
                   causal: bool = False, block_size: BlockSize = 128, num_heads: Optional[int] = None,
                   device=None) -> BlockMask:
    """p - window_left <= j <= p + window_right (FlashAttention's ``window_size=(left, right)``).

    ``window=W`` alone means W keys including the query itself (left W-1, right 0).
    Give either ``window`` or ``window_left``/``window_right`` (a missing side is 0).
    """
    sides = window_left is not None or window_right is not None
    if (window is None) == (not sides):
        raise ValueError("sliding_window needs either window=W or window_left/window_right"
                         + (", not both" if window is not None else ""))
    if window is not None:
        left, right = int_at_least(window, "window", 1) - 1, 0
    else:
        left = 0 if window_left is None else int_at_least(window_left, "window_left", 0)
        right = 0 if window_right is None else int_at_least(window_right, "window_right", 0)
    return _mask(ops.pattern_sliding_window(left, right, bool(causal)), seq_len, seq_len_k, block_size,
                 num_heads, device)


def streaming(seq_len: int, seq_len_k: Optional[int] = None, *, sink: int, window: int,
              block_size: BlockSize = 128, num_heads: Optional[int] = None, device=None) -> BlockMask:
    """Causal; j < sink or p - j < window (attention sinks plus a recent window)."""
    pattern_op = ops.pattern_streaming(int_at_least(sink, "sink", 0), int_at_least(window, "window", 1))
    return _mask(pattern_op, seq_len, seq_len_k, block_size, num_heads, device)


def strided(seq_len: int, seq_len_k: Optional[int] = None, *, stride: int,
            block_size: BlockSize = 128, num_heads: Optional[int] = None, device=None) -> BlockMask:
    """Causal; p - j < stride or (p - j) % stride == 0 (Sparse Transformer, strided)."""
    return _mask(ops.pattern_strided(int_at_least(stride, "stride", 1)), seq_len, seq_len_k, block_size,
                 num_heads, device)


def fixed(seq_len: int, seq_len_k: Optional[int] = None, *, stride: int, summary: int,
          block_size: BlockSize = 128, num_heads: Optional[int] = None, device=None) -> BlockMask:
    """Causal; same stride-segment, or j % stride >= stride - summary (Sparse Transformer, fixed)."""
    pattern_op = ops.pattern_fixed(int_at_least(stride, "stride", 1), int_at_least(summary, "summary", 0))
    return _mask(pattern_op, seq_len, seq_len_k, block_size, num_heads, device)


def dilated(seq_len: int, seq_len_k: Optional[int] = None, *, segments: Sequence[int],
            rates: Sequence[int], causal: bool = False, block_size: BlockSize = 128,
            num_heads: Optional[int] = None, device=None) -> BlockMask:
    """Union over branches k of: same segments[k]-segment and p % r == j % r == h % r, r = rates[k].

    With a rate > 1 the pattern reads the head index: pass the query head count as ``num_heads``.
    """
    return _mask(ops.pattern_dilated(_int_list(segments, "segments", 1), _int_list(rates, "rates", 1),
                                     bool(causal)),
                 seq_len, seq_len_k, block_size, num_heads, device)


def bigbird(seq_len: int, seq_len_k: Optional[int] = None, *, window_blocks: int = 3,
            global_blocks: int = 1, random_blocks: int = 3, seed: int = 0, causal: bool = False,
            block_size: BlockSize = 128, num_heads: Optional[int] = None, device=None) -> BlockMask:
    """BigBird over key blocks of the key block size: a window of ``window_blocks``, the first and
    last ``global_blocks`` blocks as global rows and columns, and ``random_blocks`` seeded random
    blocks per row."""
    q_len = int_at_least(seq_len, "seq_len", 0)
    k_len = q_len if seq_len_k is None else int_at_least(seq_len_k, "seq_len_k", 0)
    block_k = block_size_pair(block_size)[1]
    pattern_op = ops.pattern_bigbird(k_len, block_k, int_at_least(window_blocks, "window_blocks", 1),
                                     int_at_least(global_blocks, "global_blocks", 0),
                                     int_at_least(random_blocks, "random_blocks", 0),
                                     int_at_least(seed, "seed", 0), bool(causal))
    return _mask(pattern_op, q_len, k_len, block_size, num_heads, device)


def longformer(seq_len: int, seq_len_k: Optional[int] = None, *, window: int,
               global_tokens: Sequence[int] = (), causal: bool = False, block_size: BlockSize = 128,
               num_heads: Optional[int] = None, device=None) -> BlockMask:
    """|p - j| <= window // 2, or j or p among ``global_tokens``."""
    return _mask(ops.pattern_longformer(int_at_least(window, "window", 0),
                                        _int_list(global_tokens, "global_tokens", 0), bool(causal)),
                 seq_len, seq_len_k, block_size, num_heads, device)


def custom(block_bool, block_size: BlockSize = 128, causal: bool = False, seq_lengths=None) -> BlockMask:
    """Every pair of the selected blocks of a boolean block matrix (see ``BlockMask.from_dense``)."""
    return BlockMask.from_dense(block_bool, block_size=block_size, causal=causal, seq_lengths=seq_lengths)


def union(*masks: BlockMask) -> BlockMask:
    """Pairs allowed by any of the masks (FlexAttention's ``or_masks``)."""
    return combine(masks, intersect=False)


def intersection(*masks: BlockMask) -> BlockMask:
    """Pairs allowed by all of the masks (FlexAttention's ``and_masks``)."""
    return combine(masks, intersect=True)


def per_head(masks: Sequence[BlockMask], num_heads: Optional[int] = None) -> BlockMask:
    """Query head h uses masks[h // (num_heads // len(masks))]; ``num_heads`` defaults to len(masks)."""
    return _per_head(list(masks), num_heads)
