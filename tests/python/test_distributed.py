"""spattn.distributed on one machine: ranks as threads (InProcessGroup) and as gloo processes.

Each rank's output, LSE and gradients, gathered back to the global order,
equal one spattn.attention call over the whole sequence (float64 inputs; the
partial LSEs are float32, so to about 1e-6), for every pattern kind the plan must handle, both layouts, GQA and
lengths that split unevenly; the bytes each rank sends equal the minimum
counted independently from the dense global mask.
"""
import os

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import distributed as sd
from cp_cases import inputs, make_mask, minimum_bytes, rank_step, reference, run_ranks

CASES = [  # pattern, layout, world size, L, heads, kv heads
    ("causal", "zigzag", 2, 256, 2, 1),
    ("causal", "contiguous", 3, 251, 2, 2),
    ("window", "contiguous", 4, 300, 2, 1),
    ("window-both", "zigzag", 3, 333, 2, 2),
    ("streaming", "contiguous", 4, 310, 4, 2),
    ("streaming", "zigzag", 2, 200, 2, 1),
    ("dilated", "contiguous", 2, 256, 2, 2),
    ("dilated", "zigzag", 4, 400, 2, 1),
    ("random", "zigzag", 3, 290, 2, 1),
    ("random", "contiguous", 2, 160, 3, 3),
    ("per-head", "contiguous", 3, 200, 2, 1),
    ("dense", "zigzag", 2, 100, 2, 2),
]


def check_rank(rank, result, mask, layout_kind, world, q, k, v, d_out, want=None):
    """One rank's gathered output, LSE and gradients against the one-call reference, and its bytes."""
    want = want or reference(q, k, v, d_out, mask)
    gathered, sent = result
    for name, got, expected in zip(("out", "lse", "dq", "dk", "dv"), gathered, want):
        same_inf = torch.equal(torch.isinf(got), torch.isinf(expected))
        diff = torch.where(torch.isinf(expected), torch.zeros_like(got), got - expected)
        err = diff.abs().nan_to_num(nan=float("inf")).max().item() if got.numel() else 0.0
        assert same_inf and err <= 2e-6, f"rank {rank}: {name} differs by {err} (infinities equal: {same_inf})"
    layout = sd.ShardLayout(layout_kind, mask.q_len, world, mask.block_size[1])
    minimum = minimum_bytes(mask, layout, rank, k)
    assert sent == minimum, f"rank {rank} sent {sent} bytes, the minimum is {minimum}"


def check_against_reference(results, mask, layout_kind, q, k, v, d_out):
    want = reference(q, k, v, d_out, mask)
    for rank, result in enumerate(results):
        check_rank(rank, result, mask, layout_kind, len(results), q, k, v, d_out, want)


@pytest.mark.parametrize("pattern,layout,world,L,heads,kv_heads", CASES)
def test_in_process_matches_one_call(pattern, layout, world, L, heads, kv_heads):
    mask = make_mask(pattern, L, heads)
    q, k, v, d_out = inputs(L, heads, kv_heads, seed=world * 1000 + L)
    results = sd.InProcessGroup(world).run(lambda t: rank_step(t, q, k, v, d_out, mask, layout))
    check_against_reference(results, mask, layout, q, k, v, d_out)


def test_a_sequence_mask_needs_no_whole_block_mask():
    L = 300
    mask = make_mask("streaming", L, 2)
    short = make_mask("streaming", 64, 2)  # the same pattern, its mask built on a short length
    seq = sd.SequenceMask(short.pattern, L, tuple(short.block_size))
    q, k, v, d_out = inputs(L, 2, 1, seed=3)
    results = sd.InProcessGroup(3).run(lambda t: rank_step(t, q, k, v, d_out, seq, "contiguous", mask))
    check_against_reference(results, mask, "contiguous", q, k, v, d_out)


def test_window_moves_only_the_previous_ranks_tail():
    L, world = 1024, 4
    mask = make_mask("window", L, 1)  # 53 keys: each rank needs the last 64 rows (4 blocks) of its predecessor
    layout = sd.ShardLayout("contiguous", L, world, mask.block_size[1])
    plan = sd.ContextParallelPlan(mask.pattern, layout, mask.block_size, 1)
    for r in range(world):
        for s in range(world):
            if s != r:
                assert plan.rows_received(r, s) == (64 if s == r - 1 else 0), (r, s)


def test_rows_without_keys_give_zero_and_no_nan():
    L = 128
    blocks = torch.zeros(8, 8, dtype=torch.bool)
    blocks[4:, :2] = True  # query blocks 0-3 keep nothing
    mask = sd_mask = __import__("spattn").patterns.custom(blocks, block_size=16)
    q, k, v, d_out = inputs(L, 2, 1, seed=7)
    results = sd.InProcessGroup(2).run(lambda t: rank_step(t, q, k, v, d_out, sd_mask, "contiguous"))
    check_against_reference(results, mask, "contiguous", q, k, v, d_out)
    out, lse, dq = results[0][0][:3]
    assert torch.all(out[:, :, :64] == 0) and torch.all(lse[:, :, :64] == float("-inf"))
    assert torch.isfinite(dq).all()


def test_the_lse_is_differentiable_and_only_q_k_v_outputs_are_kept():
    """A loss on both outputs (out and LSE): the gradients equal one call's; the saved tensors of
    the rank's graph are q, k, v, out and lse alone (no received rows, no partial results)."""
    L, world = 250, 3
    mask = make_mask("causal", L, 2)
    q, k, v, d_out = inputs(L, 2, 1, seed=11)
    w = torch.randn(1, 2, L, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = spattn.attention(qa, ka, va, mask, return_lse=True)
    ((out * d_out).sum() + (lse * w).sum()).backward()
    want = (qa.grad, ka.grad, va.grad)

    def step(t):
        layout = sd.ShardLayout("zigzag", L, world, mask.block_size[1])
        q_r, k_r, v_r = (sd.shard(x, layout, t).clone().requires_grad_() for x in (q, k, v))
        d_r, w_r = sd.shard(d_out, layout, t), sd.shard(w.unsqueeze(-1), layout, t).squeeze(-1)
        out_r, lse_r = sd.attention(q_r, k_r, v_r, mask, group=t, layout=layout, return_lse=True)
        saved = {tuple(x.shape) for x in out_r.grad_fn.saved_tensors}
        ((out_r * d_r).sum() + (lse_r * w_r).sum()).backward()
        grads = [sd.unshard(g, layout, t) for g in (q_r.grad, k_r.grad, v_r.grad)]
        return grads, saved, {tuple(x.shape) for x in (q_r, k_r, out_r, lse_r)}

    for grads, saved, own in sd.InProcessGroup(world).run(step):
        assert saved <= own, f"the graph keeps tensors of shapes {saved - own} besides q, k, v, out and lse"
        for name, got, expected in zip(("dq", "dk", "dv"), grads, want):
            err = (got - expected).abs().max().item()
            assert err <= 2e-6, f"{name} differs by {err}"


def test_bad_arguments_name_the_parameter():
    mask = make_mask("causal", 256, 2)
    group = sd.InProcessGroup(2)
    t = group.transport(0)
    q = torch.randn(1, 2, 128, 16)
    with pytest.raises(ValueError, match="layout must be one of"):
        sd.attention(q, q, q, mask, group=t, layout="ring")
    with pytest.raises(ValueError, match="q has 100 rows but rank 0's shard"):
        sd.attention(q[:, :, :100], q, q, mask, group=t)
    with pytest.raises(ValueError, match="fewer than the 8 chunks"):
        sd.ShardLayout("zigzag", 100, 4, 16)
    with pytest.raises(TypeError, match="mask must be a spattn.BlockMask"):
        sd.attention(q, q, q, None, group=t)
    with pytest.raises(ValueError, match="Lq == Lk"):
        sd.attention(q, q, q, make_mask("dense", 256, 2).__class__.from_pattern(mask.pattern, 128, 256, 16), group=t)


# ---- gloo: one process per rank --------------------------------------------------------------------

def _gloo_worker(rank, world, port, cases, queue):
    """Runs every case as one rank and checks its gathered results against the one-call
    reference here; reports (rank, None) or (rank, the failure's text)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for pattern, layout, L, heads, kv_heads in cases:
            mask = make_mask(pattern, L, heads)
            q, k, v, d_out = inputs(L, heads, kv_heads, seed=L + world)
            result = rank_step(sd.TorchTransport(), q, k, v, d_out, mask, layout)
            check_rank(rank, result, mask, layout, world, q, k, v, d_out)
        queue.put((rank, None))
    except Exception as error:  # the parent reports it
        queue.put((rank, f"{type(error).__name__}: {error}"))
    finally:
        dist.destroy_process_group()


GLOO_CASES = {
    2: [("causal", "zigzag", 256, 2, 1), ("dilated", "contiguous", 256, 2, 2)],
    3: [("streaming", "contiguous", 301, 2, 1), ("random", "zigzag", 290, 2, 1)],
    4: [("window-both", "zigzag", 400, 2, 2), ("per-head", "contiguous", 256, 2, 1)],
    8: [("causal", "zigzag", 512, 2, 1), ("window", "contiguous", 512, 2, 2)],
}


@pytest.mark.parametrize("world", sorted(GLOO_CASES))
def test_gloo_processes_match_one_call(world):
    failures = run_ranks(world, _gloo_worker, (GLOO_CASES[world],), timeout=300)
    assert not failures, failures
