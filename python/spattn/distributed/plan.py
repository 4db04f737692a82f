"""The context-parallel plan: which key blocks move where, and the calls each rank makes.

Built once from the global pattern, the sequence length and a ShardLayout.
For rank r and a peer s, the blocks r needs from s are the key blocks of s's
chunks that some query of r's chunks keeps: a mask of each of r's chunks as a
single query block over the whole sequence in blocks of the layout's size,
with the pattern framed at the chunk's place (``Pattern.framed``), lists them
exactly. They travel as consecutive runs (K and V rows of every kv head) and
nothing else does, so the bytes moved are that minimum by construction.

Each rank then attends, for each of its query chunks, to its own chunks and
to every received run, one call per (query chunk, key stretch) through a mask
of the framed pattern; the partial results are merged by their LSE.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from spattn._pattern import Pattern
from spattn.block_mask import BlockMask, BlockSize, block_size_pair
from spattn.distributed.layout import ShardLayout


@dataclass(frozen=True)
class SequenceMask:
    """A pattern over a whole sequence of `seq_len` positions with its block sizes, without the
    block lists a BlockMask of that length would hold (context parallelism reads only the
    pattern, so a million-token causal mask need not be built whole). ``SequenceMask.of(mask)``
    takes a BlockMask's; a pattern can come from a mask built on a short length (patterns are
    shape-free, except BigBird's and custom tables, which belong to their lengths)."""
    pattern: Pattern
    seq_len: int
    block_size: Tuple[int, int] = (128, 128)

    @classmethod
    def of(cls, mask: BlockMask) -> "SequenceMask":
        if mask.q_len != mask.k_len:
            raise ValueError(f"context parallelism splits one sequence: the mask must have Lq == Lk, got "
                             f"Lq={mask.q_len}, Lk={mask.k_len}")
        return cls(mask.pattern, mask.q_len, tuple(mask.block_size))


@dataclass(frozen=True)
class Run:
    """Consecutive key rows one rank receives from a peer: global keys [start, start + length),
    rows [offset, offset + length) of that peer's receive buffer, rows [source, source + length)
    of the peer's shard."""
    start: int
    length: int
    offset: int
    source: int


@dataclass(frozen=True)
class Call:
    """One attention call of a rank: its query chunk `piece` (rows [q_offset, q_offset + q_len) of
    its shard) over `k_len` keys starting at global key `k_start`, read from its own shard
    (peer None) or the receive buffer of `peer`, from row `k_offset`."""
    piece: int
    q_offset: int
    q_len: int
    peer: Optional[int]
    k_offset: int
    k_len: int
    k_start: int
    mask: BlockMask


def needed_blocks(pattern: Pattern, queries: Tuple[int, int], seq_len: int, block: int, num_heads: int) -> List[int]:
    """The key blocks (of `block` keys, counted from key 0) holding a key that some query of global
    rows [queries[0], queries[1]) keeps under `pattern` (any head): the kept columns of a mask of those
    rows as one query block, the pattern framed at their place."""
    q_len = queries[1] - queries[0]
    if q_len <= 0:
        return []
    framed = pattern.framed(queries[0], 0, seq_len, seq_len)
    coarse = BlockMask.from_pattern(framed, q_len, seq_len, (q_len, block), num_heads=num_heads)
    return sorted(set(coarse.kv_indices.tolist()))


def _runs(blocks: List[int]) -> List[Tuple[int, int]]:
    """Consecutive block indices as (first, last) pairs."""
    runs: List[Tuple[int, int]] = []
    for b in blocks:
        if runs and runs[-1][1] == b - 1:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((b, b))
    return runs


class ContextParallelPlan:
    """The plan of one pattern over a layout; ``rank(r)`` is rank r's part (built on first use).

    `pattern` is the global pattern (``mask.pattern`` of a BlockMask built for the whole
    sequence), `block_size` the block sizes of the per-call masks (the global mask's),
    `num_heads` the query heads (head-dependent patterns need it).
    """

    def __init__(self, pattern: Pattern, layout: ShardLayout, block_size: BlockSize = 128,
                 num_heads: int = 1):
        self.pattern = pattern
        self.layout = layout
        self.block_size = block_size_pair(block_size)
        self.num_heads = num_heads
        self._needed: Dict[int, set] = {}
        self._ranks: Dict[int, "RankPlan"] = {}

    def needed(self, receiver: int, sender: int) -> List[Tuple[int, List[int]]]:
        """For each chunk of `sender` (index in its shard), the blocks (counted from the chunk's
        start) `receiver` needs from it."""
        if receiver not in self._needed:
            lay = self.layout
            wanted = set()
            for queries in lay.pieces(receiver):
                wanted.update(needed_blocks(self.pattern, queries, lay.seq_len, lay.block, self.num_heads))
            self._needed[receiver] = wanted
        wanted = self._needed[receiver]
        chunks = []
        for b, (start, end) in enumerate(self.layout.pieces(sender)):
            first = start // self.layout.block  # chunks start on block boundaries
            count = -(-(end - start) // self.layout.block)
            chunks.append((b, [kb - first for kb in range(first, first + count) if kb in wanted]))
        return chunks

    def runs(self, receiver: int, sender: int) -> List[Run]:
        """What `receiver` gets from `sender`, in the order of the receive buffer."""
        lay = self.layout
        pieces = lay.pieces(sender)
        starts = [0]
        for start, end in pieces:
            starts.append(starts[-1] + end - start)
        out: List[Run] = []
        offset = 0
        for b, blocks in self.needed(receiver, sender):
            start, end = pieces[b]
            for first, last in _runs(blocks):
                lo, hi = start + first * lay.block, min(end, start + (last + 1) * lay.block)
                out.append(Run(lo, hi - lo, offset, starts[b] + lo - start))
                offset += hi - lo
        return out

    def rows_received(self, receiver: int, sender: int) -> int:
        return sum(run.length for run in self.runs(receiver, sender))

    def rank(self, r: int) -> "RankPlan":
        if r not in self._ranks:
            self._ranks[r] = RankPlan(self, r)
        return self._ranks[r]


class RankPlan:
    """One rank's part: the rows it sends to each peer, the runs it receives, its calls."""

    def __init__(self, plan: ContextParallelPlan, rank: int):
        lay = plan.layout
        self.rank = rank
        peers = [s for s in range(lay.world_size) if s != rank]
        self.recv_runs = {s: plan.runs(rank, s) for s in peers}
        self.recv_rows = {s: sum(run.length for run in runs) for s, runs in self.recv_runs.items()}
        self.send_rows = {}
        for s in peers:
            sent = [torch.arange(run.source, run.source + run.length, dtype=torch.int64) for run in plan.runs(s, rank)]
            self.send_rows[s] = torch.cat(sent) if sent else torch.zeros(0, dtype=torch.int64)
        self.calls: List[Call] = []
        mine = lay.pieces(rank)
        q_offsets = [0]
        for start, end in mine:
            q_offsets.append(q_offsets[-1] + end - start)
        stretches = [(None, q_offsets[b], end - start, start) for b, (start, end) in enumerate(mine)]
        stretches += [(s, run.offset, run.length, run.start) for s in peers for run in self.recv_runs[s]]
        for a, (q_start, q_end) in enumerate(mine):
            for peer, k_offset, k_len, k_start in stretches:
                framed = plan.pattern.framed(q_start, k_start, lay.seq_len, lay.seq_len)
                mask = BlockMask.from_pattern(framed, q_end - q_start, k_len, plan.block_size,
                                              num_heads=plan.num_heads)
                # Every rank keeps its first call, so that its backward always reaches the
                # exchange (its peers wait there for its gradients).
                if mask.num_blocks or not self.calls:
                    self.calls.append(Call(a, q_offsets[a], q_end - q_start, peer, k_offset, k_len, k_start, mask))
        self.pieces = mine
        self.q_offsets = q_offsets
