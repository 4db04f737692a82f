"""spattn.distributed.attention: one sequence's attention over the ranks of a group.

Each rank passes its shard of q, k and v (``shard`` of the global tensors,
(B, H, L_rank, D)) and the global mask. The rank sends the key and value rows
its peers' queries need (and only those: ContextParallelPlan), receives the
rows its own queries need, attends to its own and the received rows (one
spattn.attention call per query chunk and key stretch, the pattern framed at
their places in the sequence), and merges the partial results by their LSE in
float32. The result is this rank's shard of the output (and LSE): exactly the
rows one spattn.attention call over the whole sequence would give there.

Gradients flow back along the same routes: dQ stays with its rank; the
gradients of received K and V rows go back to their owners, which add them in
rank order (deterministic).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Tuple

import torch

from spattn.attention import attention as _attention
from spattn.block_mask import BlockMask
from spattn.distributed.layout import ShardLayout
from spattn.distributed.plan import ContextParallelPlan, RankPlan, SequenceMask
from spattn.distributed.transport import Transport, exchange_order, transport_for


class _Exchange(torch.autograd.Function):
    """K and V rows to the peers that need them, and back for the gradients.

    Returns k and v themselves (so that a rank's backward always runs the
    exchange its peers wait for) followed by the (2, B, Hkv, rows, D) K/V
    buffer to be received from each peer, in peer order; the exchange runs on,
    and `pending` gets the handle to wait on before reading those buffers."""

    @staticmethod
    def forward(ctx, transport: Transport, rank_plan: RankPlan, pending: list, k: torch.Tensor, v: torch.Tensor):
        B, Hkv, _, D = k.shape
        sends = {s: torch.stack((k.index_select(2, rows.to(k.device)), v.index_select(2, rows.to(k.device))))
                 for s, rows in rank_plan.send_rows.items() if rows.numel()}
        recvs = {s: k.new_empty((2, B, Hkv, n, D)) for s, n in rank_plan.recv_rows.items()}
        pending.append(transport.start_exchange(sends, recvs))  # the caller waits before reading them
        ctx.transport, ctx.rank_plan = transport, rank_plan
        ctx.kv_shape = k.shape
        ctx.peers = sorted(recvs)
        return (k.view_as(k), v.view_as(v)) + tuple(recvs[s] for s in ctx.peers)

    @staticmethod
    def backward(ctx, dk_local, dv_local, *d_received):
        plan: RankPlan = ctx.rank_plan
        like = dk_local if dk_local is not None else dv_local
        if like is None:
            like = next(g for g in d_received if g is not None)
        B, Hkv, _, D = ctx.kv_shape
        sends = {s: g.contiguous() if g is not None else like.new_zeros((2, B, Hkv, plan.recv_rows[s], D))
                 for s, g in zip(ctx.peers, d_received) if plan.recv_rows[s]}
        recvs = {s: like.new_empty((2, B, Hkv, rows.numel(), D)) for s, rows in plan.send_rows.items() if rows.numel()}
        ctx.transport.exchange(sends, recvs)
        dk = dk_local.clone() if dk_local is not None else like.new_zeros(ctx.kv_shape)
        dv = dv_local.clone() if dv_local is not None else like.new_zeros(ctx.kv_shape)
        for s in sorted(recvs):  # a fixed order: the sums are the same run after run
            rows = plan.send_rows[s].to(dk.device)
            dk.index_add_(2, rows, recvs[s][0])
            dv.index_add_(2, rows, recvs[s][1])
        return None, None, None, dk, dv


def merge_partials(parts, like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Partial (out, lse) pairs of the same query rows merged in float32 (float64 for float64
    inputs): lse = log(sum(exp(lse_s))), out = sum(exp(lse_s - lse) * out_s). Rows no part
    allows give 0 and -inf. Returns the merged out in that precision and the float32 LSE."""
    B, H, L, D = like.shape
    acc = torch.promote_types(like.dtype, torch.float32)
    if not parts:
        return like.new_zeros((B, H, L, D), dtype=acc), like.new_full((B, H, L), float("-inf"), dtype=torch.float32)
    lse = torch.stack([p[1] for p in parts]).to(acc)
    top = lse.amax(0)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    weights = torch.exp(lse - top)
    total = weights.sum(0)
    some = total > 0
    safe_total = torch.where(some, total, torch.ones_like(total))
    merged_lse = torch.where(some, top + torch.log(safe_total), torch.full_like(total, float("-inf")))
    out = sum((w / safe_total).unsqueeze(-1) * o.to(acc) for w, (o, _) in zip(weights, parts))
    return out, merged_lse.float()


_PLANS: "OrderedDict[tuple, ContextParallelPlan]" = OrderedDict()
_KEPT_PLANS = 16


def plan_for(mask: SequenceMask, layout: ShardLayout, num_heads: int) -> ContextParallelPlan:
    """The plan of `mask` over `layout`, built once and kept: the last few plans, keyed by the
    pattern object (patterns are immutable; the plan holds it, so its id stays its own), the
    length, block sizes, heads and layout."""
    key = (id(mask.pattern), mask.seq_len, mask.block_size, num_heads, layout)
    plan = _PLANS.get(key)
    if plan is None or plan.pattern is not mask.pattern:
        plan = _PLANS[key] = ContextParallelPlan(mask.pattern, layout, mask.block_size, num_heads)
        while len(_PLANS) > _KEPT_PLANS:
            _PLANS.popitem(last=False)
    _PLANS.move_to_end(key)
    return plan


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: BlockMask, *, group=None,
              layout="zigzag", scale: Optional[float] = None, return_lse: bool = False,
              backend: str = "auto"):
    """This rank's shard of ``spattn.attention(q_all, k_all, v_all, mask)`` over the whole sequence.

    q (B, Hq, L_rank, D), k and v (B, Hkv, L_rank, D): this rank's shard in the layout's
    order (``spattn.distributed.shard``). `mask` is the global mask (Lq = Lk = the sequence
    length), or a SequenceMask (its pattern, the length and block sizes, which is all that is read). `group`: a torch.distributed
    process group (None: the default group) or a spattn transport (e.g. of an
    InProcessGroup). `layout`: "zigzag" (default; balanced under causal masks),
    "contiguous", or a ShardLayout (its block must be the mask's key block size).
    Differentiable with respect to q, k and v.
    """
    if isinstance(mask, BlockMask):
        mask = SequenceMask.of(mask)
    if not isinstance(mask, SequenceMask):
        raise TypeError(f"mask must be a spattn.BlockMask built for the whole sequence or a SequenceMask, "
                        f"got {type(mask).__name__}")
    transport = transport_for(group)
    if isinstance(layout, str):
        layout = ShardLayout(layout, mask.seq_len, transport.world_size, mask.block_size[1])
    if not isinstance(layout, ShardLayout):
        raise TypeError(f"layout must be 'zigzag', 'contiguous' or a ShardLayout, got {type(layout).__name__}")
    if layout.world_size != transport.world_size or layout.seq_len != mask.seq_len or layout.block != mask.block_size[1]:
        raise ValueError(f"{layout} does not fit the mask (length {mask.seq_len}, key block {mask.block_size[1]}) "
                         f"and group ({transport.world_size} ranks)")
    local = layout.local_len(transport.rank)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (batch, heads, L_rank, head_dim)")
        if t.shape[2] != local:
            raise ValueError(f"{name} has {t.shape[2]} rows but rank {transport.rank}'s shard of {layout} holds {local}")
    rank_plan = plan_for(mask, layout, q.shape[1]).rank(transport.rank)
    pending = []
    k_own, v_own, *received = _Exchange.apply(transport, rank_plan, pending, k, v)
    buffers = dict(zip(sorted(rank_plan.recv_rows), received))
    parts = [[] for _ in rank_plan.pieces]
    # The rank's own chunks first, then each peer's rows as their stage arrives.
    stage = {peer: n for n, peer in enumerate(exchange_order(transport.rank, transport.world_size))}
    exchange = pending[0]
    for call in sorted(rank_plan.calls, key=lambda c: -1 if c.peer is None else stage[c.peer]):
        if call.peer is None:
            k_part, v_part = k_own.narrow(2, call.k_offset, call.k_len), v_own.narrow(2, call.k_offset, call.k_len)
        else:
            exchange.wait(call.peer)
            kv = buffers[call.peer].narrow(3, call.k_offset, call.k_len)
            k_part, v_part = kv[0], kv[1]
        q_part = q.narrow(2, call.q_offset, call.q_len)
        parts[call.piece].append(_attention(q_part, k_part, v_part, call.mask, scale=scale, return_lse=True,
                                            backend=backend))
    exchange.wait()  # the sends, and peers no call read
    merged = [merge_partials(p, q.narrow(2, rank_plan.q_offsets[a], rank_plan.q_offsets[a + 1] -
                                         rank_plan.q_offsets[a])) for a, p in enumerate(parts)]
    out = torch.cat([m[0] for m in merged], dim=2).to(q.dtype)
    if not return_lse:
        return out
    return out, torch.cat([m[1] for m in merged], dim=2)
