"""Masks, inputs and checks shared by the context-parallel tests (in-process and gloo)."""
import socket

import torch
import torch.multiprocessing as mp

import spattn
from spattn import distributed as sd
from spattn import patterns

BLOCK = 16  # small blocks, so that short sequences still have many


def make_mask(name: str, L: int, heads: int):
    """A global mask of one of the patterns the context-parallel tests cover."""
    b = BLOCK
    if name == "causal":
        return patterns.causal(L, block_size=b)
    if name == "window":
        return patterns.sliding_window(L, window=3 * b + 5, block_size=b)
    if name == "window-both":
        return patterns.sliding_window(L, window_left=2 * b + 3, window_right=b + 1, block_size=b)
    if name == "streaming":
        return patterns.streaming(L, sink=5, window=2 * b + 7, block_size=b)
    if name == "dilated":
        return patterns.dilated(L, segments=[4 * b, 8 * b], rates=[1, 2], causal=True, block_size=b,
                                num_heads=heads)
    if name == "random":
        g = torch.Generator().manual_seed(L)
        nb = -(-L // b)
        blocks = torch.rand(nb, nb, generator=g) < 0.15
        blocks |= torch.eye(nb, dtype=torch.bool)
        return patterns.custom(blocks, block_size=b, causal=True, seq_lengths=(L, L))
    if name == "per-head":
        return patterns.per_head([patterns.causal(L, block_size=b),
                                  patterns.sliding_window(L, window=2 * b, block_size=b)], num_heads=heads)
    if name == "dense":
        return patterns.dense(L, block_size=b)
    raise ValueError(name)


def inputs(L: int, heads: int, kv_heads: int, dtype=torch.float64, seed: int = 0, batch: int = 1, dim: int = 16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, L, dim, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, L, dim, generator=g, dtype=dtype)
    v = torch.randn(batch, kv_heads, L, dim, generator=g, dtype=dtype)
    d_out = torch.randn(batch, heads, L, dim, generator=g, dtype=dtype)
    return q, k, v, d_out


def reference(q, k, v, d_out, mask):
    """Output, LSE and gradients of one spattn.attention call over the whole sequence."""
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = spattn.attention(q, k, v, mask, return_lse=True)
    (out * d_out).sum().backward()
    return out.detach(), lse.detach(), q.grad, k.grad, v.grad


def rank_step(transport, q, k, v, d_out, mask, layout_kind, global_mask=None):
    """One rank's shards, its context-parallel output, LSE and gradients, and the bytes it sent.
    `mask` is what the call gets (a BlockMask or a SequenceMask); `global_mask`, the BlockMask of
    the whole sequence, defaults to it."""
    global_mask = mask if global_mask is None else global_mask
    layout = sd.ShardLayout(layout_kind, global_mask.q_len, transport.world_size, global_mask.block_size[1])
    q_r, k_r, v_r, d_r = (sd.shard(t, layout, transport).clone() for t in (q, k, v, d_out))
    for t in (q_r, k_r, v_r):
        t.requires_grad_()
    out, lse = sd.attention(q_r, k_r, v_r, mask, group=transport, layout=layout, return_lse=True)
    sent = transport.bytes_sent
    (out * d_r).sum().backward()
    gathered = [sd.unshard(t.detach(), layout, transport) for t in (out, lse.unsqueeze(-1), q_r.grad, k_r.grad,
                                                                    v_r.grad)]
    gathered[1] = gathered[1].squeeze(-1)
    return gathered, sent


def minimum_bytes(mask, layout, rank: int, k: torch.Tensor) -> int:
    """The K and V bytes `rank` must send: for each peer, the key blocks of `rank`'s chunks holding a key
    some query of the peer's chunks keeps, read off the dense global mask (an independent count)."""
    dense = mask.to_dense().any(0)  # (L, L) over heads
    mine = layout.positions(rank)
    rows = 0
    for peer in range(layout.world_size):
        if peer == rank:
            continue
        needed = dense[layout.positions(peer)][:, mine].any(0)
        for start, end in layout.pieces(rank):  # whole blocks of each chunk
            for lo in range(start, end, layout.block):
                hi = min(end, lo + layout.block)
                sel = (mine >= lo) & (mine < hi)
                if needed[sel].any():
                    rows += hi - lo
    B, Hkv, _, D = k.shape
    return 2 * rows * B * Hkv * D * k.element_size()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, worker, args: tuple, timeout: float) -> dict:
    """Spawns `world` processes, worker(rank, world, port, *args, queue), each putting (rank, None)
    or (rank, the failure's text) on the queue; returns the failures by rank."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port) + args + (queue,)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        reports = dict(queue.get(timeout=timeout) for _ in range(world))
    finally:
        for p in procs:
            p.join(timeout=60)
    failures = {rank: text for rank, text in reports.items() if text is not None}
    failures.update({r: f"exit code {p.exitcode}" for r, p in enumerate(procs) if p.exitcode and r not in failures})
    return failures
