"""spattn.attention against dense float64 attention (SDPA with the equivalent boolean mask).

Every pattern over odd shapes (Lq == Lk, Lq < Lk, Lq > Lk, odd and unequal
block sizes), GQA, float64 through the exact reference and float32/bfloat16
through the fast CPU kernel, non-contiguous (B, L, H, D) views, return_lse,
empty rows, mask=None, and outputs that keep the layout of q.
"""
import math

import pytest
import torch

import spattn
from spattn import patterns

import spec
from spec import randn, reference_attention

SHAPES = [  # (Lq, Lk, block_size)
    (77, 77, 16),
    (45, 100, (16, 32)),
    (100, 45, 7),
]


def _bigbird_table(mask, n, r):
    return mask.pattern.table_i32.view(n, r) if r else torch.empty(n, 0, dtype=torch.int32)


def case(name, Lq, Lk, block, heads):
    """(mask, allowed (H or 1, Lq, Lk)) of pattern `name` for the shape."""
    kw = dict(block_size=block)
    bk = block if isinstance(block, int) else block[1]
    if name == "dense":
        return patterns.dense(Lq, Lk, **kw), spec.dense(Lq, Lk)
    if name == "causal":
        return patterns.causal(Lq, Lk, **kw), spec.dense(Lq, Lk, causal=True)
    if name == "block_diagonal":
        return (patterns.block_diagonal(Lq, Lk, diagonal_block=13, causal=True, **kw),
                spec.block_diagonal(Lq, Lk, 13, causal=True))
    if name == "sliding_window":
        return patterns.sliding_window(Lq, Lk, window=19, **kw), spec.sliding_window(Lq, Lk, 18, 0)
    if name == "sliding_window_sides":
        return (patterns.sliding_window(Lq, Lk, window_left=9, window_right=5, **kw),
                spec.sliding_window(Lq, Lk, 9, 5))
    if name == "streaming":
        return patterns.streaming(Lq, Lk, sink=3, window=11, **kw), spec.streaming(Lq, Lk, 3, 11)
    if name == "strided":
        return patterns.strided(Lq, Lk, stride=6, **kw), spec.strided(Lq, Lk, 6)
    if name == "fixed":
        return patterns.fixed(Lq, Lk, stride=10, summary=3, **kw), spec.fixed(Lq, Lk, 10, 3)
    if name == "dilated":
        segments, rates = [20, 40], [1, 2]
        return (patterns.dilated(Lq, Lk, segments=segments, rates=rates, num_heads=heads, **kw),
                spec.dilated(Lq, Lk, segments, rates, heads=heads))
    if name == "bigbird":
        mask = patterns.bigbird(Lq, Lk, window_blocks=3, global_blocks=1, random_blocks=2, seed=5, **kw)
        n = math.ceil(Lk / bk)
        return mask, spec.bigbird(Lq, Lk, bk, 3, 1, _bigbird_table(mask, n, 2))
    if name == "longformer":
        tokens = [0, 17, Lk - 1]
        return (patterns.longformer(Lq, Lk, window=8, global_tokens=tokens, causal=True, **kw),
                spec.longformer(Lq, Lk, 8, tokens, causal=True))
    if name == "custom":
        bq = block if isinstance(block, int) else block[0]
        g = torch.Generator().manual_seed(9)
        blocks = torch.rand(heads, math.ceil(Lq / bq), math.ceil(Lk / bk), generator=g) < 0.4
        mask = patterns.custom(blocks, block_size=block, seq_lengths=(Lq, Lk))
        return mask, spec.custom(blocks, bq, bk, Lq, Lk)
    if name == "union":
        a = patterns.dilated(Lq, Lk, segments=[16], rates=[3], num_heads=heads, **kw)
        b = patterns.sliding_window(Lq, Lk, window=7, causal=True, **kw)
        return a | b, spec.dilated(Lq, Lk, [16], [3], heads=heads) | spec.sliding_window(Lq, Lk, 6, 0, True)
    if name == "intersection":
        a = patterns.causal(Lq, Lk, **kw)
        b = patterns.block_diagonal(Lq, Lk, diagonal_block=20, **kw)
        return patterns.intersection(a, b), spec.dense(Lq, Lk, True) & spec.block_diagonal(Lq, Lk, 20)
    if name == "per_head":
        parts = [patterns.causal(Lq, Lk, **kw), patterns.streaming(Lq, Lk, sink=2, window=5, **kw)]
        allowed = torch.cat([spec.dense(Lq, Lk, True), spec.streaming(Lq, Lk, 2, 5)])
        return patterns.per_head(parts, num_heads=heads), allowed.repeat_interleave(heads // 2, dim=0)
    raise AssertionError(name)


PATTERNS = ["dense", "causal", "block_diagonal", "sliding_window", "sliding_window_sides", "streaming",
            "strided", "fixed", "dilated", "bigbird", "longformer", "custom", "union", "intersection",
            "per_head"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"Lq{s[0]}-Lk{s[1]}")
@pytest.mark.parametrize("name", PATTERNS)
def test_every_pattern_matches_sdpa_in_float64(name, shape, rng):
    Lq, Lk, block = shape
    B, Hq, Hkv, D = 2, 4, 2, 24
    mask, allowed = case(name, Lq, Lk, block, Hq)
    assert torch.equal(mask.to_dense(), allowed.expand(mask.num_heads, Lq, Lk))
    q, k, v = randn(rng, B, Hq, Lq, D), randn(rng, B, Hkv, Lk, D), randn(rng, B, Hkv, Lk, D)
    out, lse = spattn.attention(q, k, v, mask, return_lse=True)
    ref_out, ref_lse = reference_attention(q, k, v, allowed)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, ref_lse.float(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", PATTERNS)
def test_fast_cpu_kernel_float32(name, rng):
    Lq, Lk, block = 61, 83, 16
    B, Hq, Hkv, D = 1, 4, 4, 32
    mask, allowed = case(name, Lq, Lk, block, Hq)
    q, k, v = randn(rng, B, Hq, Lq, D), randn(rng, B, Hkv, Lk, D), randn(rng, B, Hkv, Lk, D)
    out, lse = spattn.attention(q.float(), k.float(), v.float(), mask, return_lse=True)
    assert out.dtype == torch.float32 and lse.dtype == torch.float32
    ref_out, ref_lse = reference_attention(q.float(), k.float(), v.float(), allowed)
    torch.testing.assert_close(out.double(), ref_out, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
def test_half_precision_inputs(dtype, tol, rng):
    mask = patterns.sliding_window(130, window=40, block_size=32)
    q, k, v = (randn(rng, 2, 3, 130, 64, dtype=dtype) for _ in range(3))
    out = spattn.attention(q, k, v, mask)
    assert out.dtype == dtype
    ref, _ = reference_attention(q, k, v, mask.to_dense())
    assert ((out.double() - ref).norm() / ref.norm()).item() < tol


def test_backends_agree(rng):
    mask = patterns.bigbird(150, window_blocks=3, random_blocks=2, block_size=16)
    q, k, v = (randn(rng, 1, 2, 150, 16, dtype=torch.float32) for _ in range(3))
    fast = spattn.attention(q, k, v, mask, backend="cpu")
    exact = spattn.attention(q, k, v, mask, backend="reference")
    torch.testing.assert_close(fast, exact, rtol=1e-5, atol=1e-5)


def test_blhd_views_are_used_without_copies(rng):
    B, L, H, D = 2, 93, 4, 16
    x = randn(rng, B, L, 3, H, D)
    q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))  # (B, H, L, D) views, non-contiguous
    assert not q.is_contiguous()
    mask = patterns.streaming(L, sink=4, window=20, block_size=16)
    out = spattn.attention(q, k, v, mask)
    ref, _ = reference_attention(q.contiguous(), k.contiguous(), v.contiguous(), mask.to_dense())
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_output_keeps_the_layout_of_q(rng):
    q = randn(rng, 2, 50, 4, 8).transpose(1, 2)  # (B, H, L, D) view of (B, L, H, D)
    k = randn(rng, 2, 4, 50, 8)
    out = spattn.attention(q, k, k)
    assert out.stride() == q.stride()
    assert out.transpose(1, 2).is_contiguous()


def test_expanded_kv_heads(rng):
    q = randn(rng, 1, 4, 40, 8)
    k = randn(rng, 1, 1, 40, 8).expand(1, 4, 40, 8)  # stride 0 over heads
    v = randn(rng, 1, 1, 40, 8).expand(1, 4, 40, 8)
    ref, _ = reference_attention(q, k.contiguous(), v.contiguous(), spec.dense(40, 40))
    torch.testing.assert_close(spattn.attention(q, k, v), ref, rtol=1e-12, atol=1e-12)


def test_mask_none_is_dense_and_scale_is_used(rng):
    q, k, v = randn(rng, 2, 2, 33, 16), randn(rng, 2, 2, 57, 16), randn(rng, 2, 2, 57, 16)
    out, lse = spattn.attention(q, k, v, scale=0.3, return_lse=True)
    ref_out, ref_lse = reference_attention(q, k, v, spec.dense(33, 57), scale=0.3)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, ref_lse.float())
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(out, plain, rtol=1e-12, atol=1e-12)


def test_rows_without_keys_give_zero_and_minus_inf(rng):
    Lq, Lk = 40, 10  # causal with Lq > Lk: the first 30 rows sit before position 0
    q, k, v = randn(rng, 1, 2, Lq, 8), randn(rng, 1, 2, Lk, 8), randn(rng, 1, 2, Lk, 8)
    out, lse = spattn.attention(q, k, v, patterns.causal(Lq, Lk, block_size=8), return_lse=True)
    assert torch.all(out[:, :, :30] == 0)
    assert torch.all(lse[:, :, :30] == float("-inf"))
    assert torch.isfinite(lse[:, :, 30:]).all() and not torch.isnan(out).any()


def test_zero_batch_and_zero_keys(rng):
    q = randn(rng, 0, 2, 5, 8)
    assert spattn.attention(q, q, q).shape == (0, 2, 5, 8)
    q, k = randn(rng, 1, 2, 5, 8), randn(rng, 1, 2, 0, 8)
    out, lse = spattn.attention(q, k, k, return_lse=True)
    assert torch.all(out == 0) and torch.all(lse == float("-inf"))
