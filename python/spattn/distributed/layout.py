"""How one sequence is split over the ranks of a context-parallel group.

A layout (spattn::dist::ShardLayout of the C++ library, which makes the
chunks) cuts the sequence into chunks at multiples of a block (the mask's
key block), as evenly as the blocks allow, and gives each rank its chunks:

- ``contiguous``: P chunks, rank r holds chunk r;
- ``zigzag``: 2P chunks, rank r holds chunks r and 2P-1-r, so under a causal
  mask every rank has the same share of the work (ring-flash-attention's
  zigzag layout).

A rank's shard is its chunks concatenated along the sequence dimension, in
that order. ``shard`` and ``unshard`` move a tensor between the global order
and this rank's shard.
"""
from __future__ import annotations

from typing import List, Tuple

import torch

from spattn._ops import ops
from spattn.block_mask import int_at_least, positive_int

KINDS = ("contiguous", "zigzag")


class ShardLayout:
    """The chunks of a ``seq_len`` sequence held by each of ``world_size`` ranks."""

    def __init__(self, kind: str, seq_len: int, world_size: int, block: int = 128):
        if kind not in KINDS:
            raise ValueError(f"layout must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.seq_len = int_at_least(seq_len, "seq_len", 1)
        self.world_size = positive_int(world_size, "world_size")
        self.block = positive_int(block, "block")
        self._pieces = [[tuple(c) for c in chunks] for chunks in
                        ops.cp_layout_pieces(kind == "zigzag", self.seq_len, self.world_size, self.block).tolist()]

    def pieces(self, rank: int) -> List[Tuple[int, int]]:
        """The global [start, end) ranges rank `rank` holds, in its shard's order."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {rank}")
        return list(self._pieces[rank])

    def local_len(self, rank: int) -> int:
        return sum(end - start for start, end in self.pieces(rank))

    def positions(self, rank: int) -> torch.Tensor:
        """The global positions of the rows of rank `rank`'s shard, int64."""
        return torch.cat([torch.arange(start, end, dtype=torch.int64) for start, end in self.pieces(rank)])

    def __eq__(self, other) -> bool:
        return (isinstance(other, ShardLayout) and (self.kind, self.seq_len, self.world_size, self.block)
                == (other.kind, other.seq_len, other.world_size, other.block))

    def __hash__(self) -> int:
        return hash((self.kind, self.seq_len, self.world_size, self.block))

    def __repr__(self) -> str:
        return (f"ShardLayout({self.kind!r}, seq_len={self.seq_len}, world_size={self.world_size}, "
                f"block={self.block})")


def _seq_dim(x: torch.Tensor, dim: int) -> int:
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be in [{-x.dim()}, {x.dim()}) for a {x.dim()}-D tensor, got {dim}")
    return dim % x.dim()


def shard(x: torch.Tensor, layout: ShardLayout, group=None, dim: int = -2) -> torch.Tensor:
    """This rank's shard of the global tensor `x` (its sequence along `dim`, default -2 as in
    (B, H, L, D)); `group` is a process group (default: the default one) or a spattn transport."""
    from spattn.distributed.transport import transport_for
    transport = transport_for(group)
    _check_world(layout, transport.world_size)
    d = _seq_dim(x, dim)
    if x.shape[d] != layout.seq_len:
        raise ValueError(f"x has {x.shape[d]} positions along dim {dim} but the layout is for {layout.seq_len}")
    return torch.cat([x.narrow(d, start, end - start) for start, end in layout.pieces(transport.rank)], dim=d)


def unshard(x: torch.Tensor, layout: ShardLayout, group=None, dim: int = -2) -> torch.Tensor:
    """The global tensor from every rank's shard `x` (an all-gather; every rank gets it)."""
    from spattn.distributed.transport import transport_for
    transport = transport_for(group)
    _check_world(layout, transport.world_size)
    d = _seq_dim(x, dim)
    if x.shape[d] != layout.local_len(transport.rank):
        raise ValueError(f"x has {x.shape[d]} positions along dim {dim} but rank {transport.rank}'s shard "
                         f"holds {layout.local_len(transport.rank)}")
    shards = transport.all_gather(x.movedim(d, 0).contiguous(),
                                  [layout.local_len(r) for r in range(layout.world_size)])
    out = x.new_empty((layout.seq_len,) + tuple(x.movedim(d, 0).shape[1:]))
    for r, part in enumerate(shards):
        out[layout.positions(r).to(x.device)] = part
    return out.movedim(0, d)


def _check_world(layout: ShardLayout, world_size: int) -> None:
    if layout.world_size != world_size:
        raise ValueError(f"the layout is for {layout.world_size} ranks but the group has {world_size}")
