"""spattn.BlockMask: the plan every backend reads, as PyTorch tensors.

A mask lists, for each (mask head, query block), the sorted key blocks to
visit (``kv_indices`` int32 between ``row_offsets`` int64), each marked full or
partial (``kv_full`` uint8); inside partial blocks the mask's pattern decides
each pair. It has one head (shared by every query head) or one per query head
(patterns that read the head index). It is built on the host by the C++
library (``spattn::BlockMask::build``, time proportional to the kept blocks)
and moved with ``.to(device)``; the arrays then live where the attention runs.

The mask crosses into the operators as one tensor, ``packed``: int64 words
holding a header, the three arrays and the pattern's encoding
(python/csrc/packed_mask.hpp; ``row_offsets``, ``kv_indices`` and
``kv_full`` are views of it). The operators decode it once and keep the
decoded mask with its plans, found again by the tensor's identity and
version.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from spattn._ops import ops
from spattn._pattern import Pattern

BlockSize = Union[int, Tuple[int, int]]


def int_at_least(value, name: str, minimum: int) -> int:
    """`value` as an int in [`minimum`, 2^63) (the operators' int64); TypeError or ValueError naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value >= 2**63:
        raise ValueError(f"{name} must be < 2^63, got {value}")
    return value


def positive_int(value, name: str) -> int:
    """`value` as an int >= 1; TypeError or ValueError naming `name` otherwise."""
    return int_at_least(value, name, 1)


def block_size_pair(block_size: BlockSize) -> Tuple[int, int]:
    """(block_q, block_k) from an int or a pair."""
    if isinstance(block_size, (tuple, list)):
        if len(block_size) != 2:
            raise ValueError(f"block_size must be an int or a pair (block_q, block_k), got {block_size!r}")
        return positive_int(block_size[0], "block_size[0]"), positive_int(block_size[1], "block_size[1]")
    size = positive_int(block_size, "block_size")
    return size, size


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# Words of the packed header (python/csrc/packed_mask.hpp, kHeaderWords).
_HEADER_WORDS = 10


def _words(count: int, element_bytes: int) -> int:
    return -(-count * element_bytes // 8)


def _sections(num_rows: int, num_blocks: int, code_words: int, table_i32: int, table_i64: int) -> list:
    """Word offsets of the packed sections, as PackedHeader::sections (packed_mask.hpp) gives them."""
    row_offsets = _HEADER_WORDS
    kv_indices = row_offsets + num_rows + 1
    kv_full = kv_indices + _words(num_blocks, 4)
    code = kv_full + _words(num_blocks, 1)
    t32 = code + code_words
    t64 = t32 + _words(table_i32, 4)
    return [row_offsets, kv_indices, kv_full, code, t32, t64, t64 + table_i64]


class BlockMask:
    """Which key blocks each query block visits, and how to test pairs inside them.

    Build one with the functions of ``spattn.patterns``, ``BlockMask.from_dense``
    or ``BlockMask.from_flex``; pass it to ``spattn.attention``.
    """

    def __init__(self, q_len: int, k_len: int, block_size: Tuple[int, int], row_offsets: torch.Tensor,
                 kv_indices: torch.Tensor, kv_full: torch.Tensor, pattern: Pattern,
                 head_dependent: bool, num_heads: int = 1):
        """A mask of its arrays (on one device; checked at its first use). Its heads are counted from
        the rows; a mask of no query rows has none to count, and keeps the `num_heads` it was built for."""
        block_q, block_k = block_size
        rows = _ceil_div(q_len, block_q)
        num_heads = (row_offsets.numel() - 1) // rows if rows else num_heads
        packed = ops.block_mask_pack(q_len, k_len, block_q, block_k, num_heads, row_offsets, kv_indices, kv_full,
                                     *pattern.tensors())
        self._init(packed, q_len, k_len, block_size, num_heads, kv_indices.numel(), pattern, head_dependent)

    def _init(self, packed: torch.Tensor, q_len: int, k_len: int, block_size: Tuple[int, int], num_heads: int,
              num_blocks: int, pattern: Pattern, head_dependent: bool) -> None:
        self.packed = packed
        self.q_len = q_len
        self.k_len = k_len
        self.block_size = block_size
        self._num_heads = num_heads
        self.pattern = pattern
        self.head_dependent = head_dependent
        rows = num_heads * _ceil_div(q_len, block_size[0])
        at = _sections(rows, num_blocks, len(pattern.code), pattern.table_i32.numel(), pattern.table_i64.numel())
        self.row_offsets = packed[at[0]:at[1]]
        self.kv_indices = packed[at[1]:at[2]].view(torch.int32)[:num_blocks]
        self.kv_full = packed[at[2]:at[3]].view(torch.uint8)[:num_blocks]
        self._moved = {packed.device: self}

    @classmethod
    def _of_packed(cls, packed: torch.Tensor, q_len: int, k_len: int, block_size: Tuple[int, int],
                   num_heads: int, num_blocks: int, pattern: Pattern, head_dependent: bool) -> "BlockMask":
        mask = cls.__new__(cls)
        mask._init(packed, q_len, k_len, block_size, num_heads, num_blocks, pattern, head_dependent)
        return mask

    # ---- construction ----

    @classmethod
    def from_pattern(cls, pattern: Pattern, q_len: int, k_len: int, block_size: BlockSize = 128,
                     num_heads: Optional[int] = None, device=None) -> "BlockMask":
        """Builds the plan of `pattern` for q_len queries over k_len keys.

        `num_heads` is the number of query heads; it matters only for patterns
        that read the head index (dilated rates > 1, per-head mixes), whose
        masks get one head per query head, and such a pattern needs it.
        """
        q_len = int_at_least(q_len, "seq_len", 0)
        k_len = int_at_least(k_len, "seq_len_k", 0)
        block_q, block_k = block_size_pair(block_size)
        if num_heads is None:
            if pattern.head_dependent:
                raise ValueError(f"the pattern {pattern.describe()} reads the query head (a dilated rate > 1 or "
                                 "a per-head mix): pass num_heads=<query heads> to build its mask")
            num_heads = 1
        num_heads = positive_int(num_heads, "num_heads")
        packed = ops.block_mask_build(*pattern.tensors(), q_len, k_len, block_q, block_k, num_heads)
        mask_heads = num_heads if pattern.head_dependent else 1
        num_blocks = int(packed[6])  # the header's block count (the packed tensor is on the CPU)
        mask = cls._of_packed(packed, q_len, k_len, (block_q, block_k), mask_heads, num_blocks, pattern,
                              pattern.head_dependent)
        return mask if device is None else mask.to(device)

    @classmethod
    def from_dense(cls, block_bool: torch.Tensor, block_size: BlockSize = 128, causal: bool = False,
                   seq_lengths: Optional[Tuple[int, int]] = None) -> "BlockMask":
        """A custom mask from a boolean block matrix (nqb, nkb) or (H, nqb, nkb).

        Block (r, c) keeps every pair of query rows [r*bq, (r+1)*bq) and keys
        [c*bk, (c+1)*bk); with `causal`, pairs with j > i + (Lk - Lq) are removed.
        The lengths default to nqb*bq and nkb*bk; `seq_lengths=(Lq, Lk)` gives
        others (the last blocks are then short). A 3-D matrix gives each of
        the H query heads its own blocks. nqb or nkb may be 0 (Lq or Lk = 0).
        """
        if not isinstance(block_bool, torch.Tensor):
            raise TypeError(f"block_bool must be a torch.Tensor, got {type(block_bool).__name__}")
        if block_bool.dim() not in (2, 3):
            raise ValueError(f"block_bool must be (nqb, nkb) or (H, nqb, nkb), got shape {tuple(block_bool.shape)}")
        if block_bool.dtype != torch.bool:
            raise TypeError(f"block_bool must have dtype torch.bool, got {block_bool.dtype}")
        if block_bool.dim() == 3 and block_bool.shape[0] == 0:
            raise ValueError("block_bool must have at least one head, got shape "
                             f"{tuple(block_bool.shape)}")
        blocks = block_bool if block_bool.dim() == 3 else block_bool.unsqueeze(0)
        heads, rows, cols = blocks.shape
        block_q, block_k = block_size_pair(block_size)
        if seq_lengths is None:
            q_len, k_len = rows * block_q, cols * block_k
        else:
            q_len, k_len = (int_at_least(seq_lengths[0], "seq_lengths[0]", 0),
                            int_at_least(seq_lengths[1], "seq_lengths[1]", 0))
            if _ceil_div(q_len, block_q) != rows or _ceil_div(k_len, block_k) != cols:
                raise ValueError(
                    f"block_bool has {rows} x {cols} blocks but seq_lengths {(q_len, k_len)} with "
                    f"block_size {(block_q, block_k)} needs {_ceil_div(q_len, block_q)} x {_ceil_div(k_len, block_k)}")
        pattern = Pattern.from_op(ops.pattern_custom(blocks.cpu(), block_q, block_k, bool(causal)))
        return cls.from_pattern(pattern, q_len, k_len, (block_q, block_k), num_heads=heads,
                                device=block_bool.device)

    @classmethod
    def from_flex(cls, flex_block_mask, pattern: Optional["BlockMask"] = None) -> "BlockMask":
        """The same mask as a FlexAttention BlockMask (see ``spattn.flex``)."""
        from spattn.flex import from_flex

        return from_flex(flex_block_mask, pattern)

    def to_flex(self, mask_mod=None):
        """This mask as a FlexAttention BlockMask (see ``spattn.flex``)."""
        from spattn.flex import to_flex

        return to_flex(self, mask_mod)

    # ---- queries ----

    @property
    def device(self) -> torch.device:
        return self.packed.device

    @property
    def num_heads(self) -> int:
        """Mask heads: 1 (shared by all query heads) or one per query head."""
        return self._num_heads

    @property
    def num_blocks(self) -> int:
        """Kept (mask head, query block, key block) triples."""
        return self.kv_indices.numel()

    @property
    def num_full_blocks(self) -> int:
        return int(self.kv_full.sum().item())

    @property
    def density(self) -> float:
        """Allowed pairs / (heads * Lq * Lk), over the mask's heads; 0 when Lq or Lk is 0."""
        kept = ops.block_mask_kept_pairs(self._on(torch.device("cpu")).packed, self.num_heads)
        return kept / (self.num_heads * self.q_len * self.k_len) if self.q_len and self.k_len else 0.0

    def to_dense(self) -> torch.Tensor:
        """The token-level mask, bool (num_heads, Lq, Lk) on the mask's device. For small shapes."""
        return ops.block_mask_to_dense(self._on(torch.device("cpu")).packed, self.num_heads).to(self.device)

    def describe(self) -> str:
        return self.pattern.describe()

    # ---- conversion and composition ----

    def to(self, device) -> "BlockMask":
        """The same mask with its arrays on `device` (self when already there)."""
        try:
            device = torch.device(device)
        except TypeError as error:
            raise TypeError(f"device must be a torch.device, a string or an int, "
                            f"got {type(device).__name__}") from error
        except RuntimeError as error:
            raise ValueError(f"device must name a device, got {device!r}") from error
        if device == self.device:
            return self
        return BlockMask._of_packed(self.packed.to(device), self.q_len, self.k_len, self.block_size,
                                    self.num_heads, self.num_blocks, self.pattern, self.head_dependent)

    def _on(self, device: torch.device) -> "BlockMask":
        """The mask on `device`: self, or its copy there, made on the first request and kept."""
        moved = self._moved.get(device)
        if moved is None:
            moved = self._moved[device] = self.to(device)
        return moved

    def __or__(self, other: "BlockMask") -> "BlockMask":
        return combine([self, other], intersect=False)

    def __and__(self, other: "BlockMask") -> "BlockMask":
        return combine([self, other], intersect=True)

    def __repr__(self) -> str:
        return (f"spattn.BlockMask({self.describe()}, Lq={self.q_len}, Lk={self.k_len}, "
                f"block_size={self.block_size}, heads={self.num_heads}, blocks={self.num_blocks}, "
                f"device={self.device})")


def _same_geometry(masks: Sequence[BlockMask], what: str) -> None:
    if not masks:
        raise ValueError(f"{what} needs at least one mask")
    for n, mask in enumerate(masks):
        if not isinstance(mask, BlockMask):
            raise TypeError(f"{what}: masks[{n}] must be a spattn.BlockMask, got {type(mask).__name__}")
    first = masks[0]
    for n, mask in enumerate(masks[1:], start=1):
        if (mask.q_len, mask.k_len, mask.block_size) != (first.q_len, first.k_len, first.block_size):
            raise ValueError(
                f"{what}: masks[{n}] was built for Lq={mask.q_len}, Lk={mask.k_len}, block_size={mask.block_size} "
                f"but masks[0] for Lq={first.q_len}, Lk={first.k_len}, block_size={first.block_size}")
        if mask.device != first.device:
            raise ValueError(f"{what}: masks[{n}] is on {mask.device} but masks[0] is on {first.device}")


def combine(masks: Sequence[BlockMask], intersect: bool) -> BlockMask:
    """The union (or intersection) of masks built for the same lengths and blocks."""
    what = "intersection" if intersect else "union"
    _same_geometry(masks, what)
    pattern = masks[0].pattern
    for mask in masks[1:]:
        pattern = pattern.intersect(mask.pattern) if intersect else pattern.unite(mask.pattern)
    first = masks[0]
    return BlockMask.from_pattern(pattern, first.q_len, first.k_len, first.block_size,
                                  num_heads=max(m.num_heads for m in masks), device=first.device)


def per_head(masks: Sequence[BlockMask], num_heads: Optional[int] = None) -> BlockMask:
    """A mask whose query head h uses masks[h // (num_heads // len(masks))].

    `num_heads` (the query heads, default len(masks)) must be a multiple of len(masks).
    """
    _same_geometry(masks, "per_head")
    num_heads = len(masks) if num_heads is None else positive_int(num_heads, "num_heads")
    if num_heads % len(masks):
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of the number of masks ({len(masks)})")
    first = masks[0]
    pattern = Pattern.per_head([m.pattern for m in masks])
    return BlockMask.from_pattern(pattern, first.q_len, first.k_len, first.block_size,
                                  num_heads=num_heads, device=first.device)
