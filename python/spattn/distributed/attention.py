"""spattn.distributed.attention: one sequence's attention over the ranks of a group.

Each rank passes its shard of q, k and v (``shard`` of the global tensors,
(B, H, L_rank, D)) and the global mask. The rank sends the key and value rows
its peers' queries need (and only those: ContextParallelPlan), receives the
rows its own queries need, in stages with two in flight (at stage d it sends
to rank + d and receives from rank - d), attends to its own rows while the
first stages travel and to each stage's rows as they arrive (one attention
call per query chunk and key stretch, the pattern framed at their places in
the sequence), and merges the partial results into one float32 accumulator by
their LSE. A rank holds two stages' rows at a time. The
result is this rank's shard of the output (and LSE): exactly the rows one
spattn.attention call over the whole sequence would give there.

Only q, k, v, the output and the LSE are kept for the backward, which
exchanges the K/V rows again and computes each call's gradients under the
merged output and LSE (a call's pairs weigh exp(s - lse) of the whole row).
dQ stays with its rank; each stage's received rows' gradients go back to
their owner once the stage's calls are done, and owners add them in stage
order (deterministic). The same algorithm as
the C++ library's spattn::dist::attention (spattn/dist_attention.hpp).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Optional

import torch

from spattn._ops import ops
from spattn.attention import _check_options, _mask_on
from spattn.block_mask import BlockMask
from spattn.distributed.layout import ShardLayout
from spattn.distributed.plan import ContextParallelPlan, RankPlan, SequenceMask
from spattn.distributed.transport import Transport, transport_for


class _KvStages:
    """The K/V rows of the exchange stages d = 1 .. P-1, two in flight: at stage d this rank sends
    rank + d the rows it needs and receives from rank - d (mod P) the rows it needs itself;
    end(d) waits for the stage and starts stage d + 2. So a rank holds two stages' rows at a time."""

    def __init__(self, transport: Transport, plan: RankPlan, k: torch.Tensor, v: torch.Tensor):
        self.transport, self.plan, self.k, self.v = transport, plan, k, v
        self.pending, self.received = {}, {}
        self.start(1)
        self.start(2)

    def start(self, d: int) -> None:
        world, rank = self.transport.world_size, self.transport.rank
        if d >= world:
            return
        to, source = (rank + d) % world, (rank - d) % world
        k, v = self.k, self.v
        rows = self.plan.send_rows_on(k.device)[to]
        sends = {to: torch.stack((k.index_select(2, rows), v.index_select(2, rows)))} if rows.numel() else {}
        B, Hkv, _, D = k.shape
        self.received[d] = k.new_empty((2, B, Hkv, self.plan.recv_rows[source], D))
        self.pending[d] = self.transport.start_exchange(sends, {source: self.received[d]})

    def rows(self, call):
        """The keys and values of a call, once they may be read."""
        if call.peer is None:
            return self.k.narrow(2, call.k_offset, call.k_len), self.v.narrow(2, call.k_offset, call.k_len)
        self.pending[call.stage].wait(call.peer)
        kv = self.received[call.stage].narrow(3, call.k_offset, call.k_len)
        return kv[0], kv[1]

    def end(self, d: int) -> None:
        self.pending.pop(d).wait()
        del self.received[d]
        self.start(d + 2)


def _merge_into(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Merges a partial result (out, lse) of the same rows over other keys into (acc_out, acc_lse),
    in place: lse = log(e^acc_lse + e^lse), acc_out = e^(acc_lse - lse) acc_out + e^(lse_part - lse) out.
    A side whose LSE is -inf weighs 0; a NaN LSE makes the row NaN."""
    lse = lse.to(acc_lse.dtype)
    top = torch.maximum(acc_lse, lse)
    top = torch.where(torch.isinf(top) & (top < 0), torch.zeros_like(top), top)
    w_acc, w_new = torch.exp(acc_lse - top), torch.exp(lse - top)
    total = w_acc + w_new
    some = total > 0
    safe = torch.where(some, total, torch.ones_like(total))
    acc_out.mul_((w_acc / safe).unsqueeze(-1)).add_((w_new / safe).unsqueeze(-1) * out.to(acc_out.dtype))
    nan = torch.isnan(acc_lse) | torch.isnan(lse)
    acc_lse.copy_(torch.where(some, top + torch.log(safe), torch.full_like(total, float("-inf"))))
    acc_lse.masked_fill_(nan, float("nan"))


class _ContextParallelAttention(torch.autograd.Function):
    """This rank's output and LSE (forward), and the gradients of its q, k, v shards (backward)."""

    @staticmethod
    def forward(ctx, q, k, v, transport: Transport, plan: RankPlan, scale: Optional[float], backend: str):
        B, H, L, D = q.shape
        acc = torch.promote_types(q.dtype, torch.float32)
        kv = _KvStages(transport, plan, k, v)
        acc_out = q.new_zeros((B, H, L, D), dtype=acc)
        acc_lse = q.new_full((B, H, L), float("-inf"), dtype=acc)
        for d, calls in enumerate(plan.stages):
            for call in calls:
                k_call, v_call = kv.rows(call)
                out, lse = ops.attention(q.narrow(2, call.q_offset, call.q_len), k_call, v_call,
                                         _mask_on(call.mask, q.device), scale, backend)
                _merge_into(acc_out.narrow(2, call.q_offset, call.q_len),
                            acc_lse.narrow(2, call.q_offset, call.q_len), out, lse)
            if d:
                kv.end(d)
        out, lse = acc_out.to(q.dtype), acc_lse.float()
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.transport, ctx.plan, ctx.scale, ctx.backend = transport, plan, scale, backend
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        transport, plan = ctx.transport, ctx.plan
        world, rank = transport.world_size, transport.rank
        d_out = torch.zeros_like(out) if d_out is None else d_out.contiguous()
        d_lse = torch.zeros_like(lse) if d_lse is None else d_lse.contiguous()
        acc = torch.promote_types(q.dtype, torch.float32)
        B, Hkv, _, D = k.shape
        kv = _KvStages(transport, plan, k, v)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dk = torch.zeros(k.shape, dtype=acc, device=k.device)
        dv = torch.zeros_like(dk)
        returning = {}  # stage -> (the exchange under way, what comes back, the rows it belongs to)

        def add_returned(d):  # stage order: the sums are the same run after run
            pending, back, rows = returning.pop(d)
            pending.wait()
            if rows.numel():
                dk.index_add_(2, rows, back[0].to(acc))
                dv.index_add_(2, rows, back[1].to(acc))

        for d, calls in enumerate(plan.stages):
            if d:
                source = (rank - d) % world
                sums = k.new_zeros((2, B, Hkv, plan.recv_rows[source], D), dtype=acc)
            for call in calls:
                k_call, v_call = kv.rows(call)
                rows = slice(call.q_offset, call.q_offset + call.q_len)
                dq_c, dk_c, dv_c = ops.attention_backward(
                    d_out[:, :, rows], d_lse[:, :, rows], q[:, :, rows], k_call, v_call, out[:, :, rows],
                    lse[:, :, rows], _mask_on(call.mask, q.device), ctx.scale, ctx.backend)
                dq[:, :, rows] += dq_c
                keys = slice(call.k_offset, call.k_offset + call.k_len)
                target_k, target_v = (dk, dv) if d == 0 else (sums[0], sums[1])
                target_k[:, :, keys] += dk_c
                target_v[:, :, keys] += dv_c
            if not d:
                continue
            kv.end(d)
            # Stage d's received rows' gradients go back to their owner, in the inputs' dtype,
            # while the gradients of the rows this rank sent at stage d come back.
            to = (rank + d) % world
            sent_rows = plan.send_rows_on(k.device)[to]
            back = k.new_empty((2, B, Hkv, sent_rows.numel(), D))
            sends = {source: sums.to(k.dtype)} if sums.shape[3] else {}
            returning[d] = (transport.start_exchange(sends, {to: back}), back, sent_rows)
            if d > 1:
                add_returned(d - 1)
        if world > 1:
            add_returned(world - 1)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None, None


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
    _check_options(scale, backend, return_lse)
    rank_plan = plan_for(mask, layout, q.shape[1]).rank(transport.rank)
    out, lse = _ContextParallelAttention.apply(q, k, v, transport, rank_plan,
                                               None if scale is None else float(scale), backend)
    return (out, lse) if return_lse else out
