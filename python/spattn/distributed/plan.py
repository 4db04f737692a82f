"""The context-parallel plan: which key rows move where, and the calls each rank makes.

Built once from the global pattern, the sequence length and a ShardLayout by
the C++ library (spattn::dist::ContextParallelPlan, spattn/dist.hpp): for
each rank, the key blocks that some query of its chunks keeps, found exactly
with the pattern framed at each chunk (``Pattern.framed``); for each
(receiver, sender) pair, those of the sender's chunks as runs of consecutive
rows. The runs (K and V rows of every kv head) travel and nothing else does,
so the bytes moved are that minimum by construction.

Each rank then attends, for each of its query chunks, to its own chunks and
to every received run, one call per (query chunk, key stretch) through a mask
of the framed pattern (the C++ plan lists the calls); the partial results are
merged by their LSE.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from spattn._ops import ops
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
    (peer None, stage 0) or the receive buffer of `peer`, from row `k_offset`; that peer's rows
    arrive at exchange stage `stage` = (rank - peer) mod P."""
    piece: int
    q_offset: int
    q_len: int
    peer: Optional[int]
    k_offset: int
    k_len: int
    k_start: int
    mask: BlockMask
    stage: int


class ContextParallelPlan:
    """The plan of one pattern over a layout (every pair's runs, from the C++ plan); ``rank(r)`` is rank
    r's part, its calls' masks built on first use.

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
        runs, calls = ops.cp_plan(*pattern.tensors(), layout.kind == "zigzag", layout.seq_len, layout.world_size,
                                  layout.block, num_heads)
        self._runs: Dict[Tuple[int, int], List[Run]] = {}
        for receiver, sender, start, length, offset, source in runs.tolist():
            self._runs.setdefault((receiver, sender), []).append(Run(start, length, offset, source))
        self._calls: Dict[int, List[tuple]] = {}
        for rank, *call in calls.tolist():
            self._calls.setdefault(rank, []).append(tuple(call))
        self._ranks: Dict[int, "RankPlan"] = {}

    def runs(self, receiver: int, sender: int) -> List[Run]:
        """What `receiver` gets from `sender`, in the order of the receive buffer."""
        return self._runs.get((receiver, sender), [])

    def rows_received(self, receiver: int, sender: int) -> int:
        return sum(run.length for run in self.runs(receiver, sender))

    def rank(self, r: int) -> "RankPlan":
        if r not in self._ranks:
            self._ranks[r] = RankPlan(self, r)
        return self._ranks[r]


class RankPlan:
    """One rank's part: the rows it sends to each peer, how many it receives from each, its calls
    (``stages[d]``: the calls over the rows of exchange stage d, 0 for the rank's own)."""

    def __init__(self, plan: ContextParallelPlan, rank: int):
        lay = plan.layout
        self.rank = rank
        peers = [s for s in range(lay.world_size) if s != rank]
        self.recv_rows = {s: plan.rows_received(rank, s) for s in peers}
        self.send_rows = {}
        for s in peers:
            sent = [torch.arange(run.source, run.source + run.length, dtype=torch.int64) for run in plan.runs(s, rank)]
            self.send_rows[s] = torch.cat(sent) if sent else torch.zeros(0, dtype=torch.int64)
        self.calls: List[Call] = []
        mine = lay.pieces(rank)
        q_offsets = [0]
        for start, end in mine:
            q_offsets.append(q_offsets[-1] + end - start)
        for piece, q_offset, q_len, q_start, peer, k_offset, k_len, k_start in plan._calls.get(rank, []):
            framed = plan.pattern.framed(q_start, k_start, lay.seq_len, lay.seq_len)
            mask = BlockMask.from_pattern(framed, q_len, k_len, plan.block_size, num_heads=plan.num_heads)
            if mask.num_blocks:
                stage = 0 if peer < 0 else (rank - peer) % lay.world_size
                self.calls.append(Call(piece, q_offset, q_len, None if peer < 0 else peer, k_offset, k_len, k_start,
                                       mask, stage))
        self.stages: List[List[Call]] = [[c for c in self.calls if c.stage == d] for d in range(lay.world_size)]
        self.pieces = mine
        self.q_offsets = q_offsets
        self._send_rows_on: Dict[torch.device, Dict[int, torch.Tensor]] = {}

    def send_rows_on(self, device: torch.device) -> Dict[int, torch.Tensor]:
        """send_rows on `device`, copied there once (a copy per step would wait for the host)."""
        device = torch.device(device)
        if device not in self._send_rows_on:
            self._send_rows_on[device] = {s: rows.to(device) for s, rows in self.send_rows.items()}
        return self._send_rows_on[device]
