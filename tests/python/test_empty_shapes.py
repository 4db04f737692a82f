"""Zero lengths, batches and heads are valid everywhere and give empty results.

The rule (docs/python.md, "Empty shapes"): every pattern builder,
BlockMask.from_dense and from_flex accept Lq = 0 and Lk = 0; a mask for
Lq = 0 has no query rows and one for Lk = 0 keeps no block. spattn.attention
gives empty outputs when B, Hq or Lq is 0 and, with Lk = 0, out 0 and LSE -inf
(where SDPA gives NaN: a row with no allowed key). attention_varlen takes a
batch without rows or sequences, and gradients flow as zeros.
"""
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask

import spattn
from spattn import patterns

from spec import randn

LENGTHS = [(0, 0), (0, 9), (9, 0)]


def every_pattern(Lq, Lk):
    """One mask of every function of spattn.patterns (and the combinators) for the lengths."""
    kw = dict(block_size=4)
    return {
        "dense": patterns.dense(Lq, Lk, **kw),
        "causal": patterns.causal(Lq, Lk, **kw),
        "block_diagonal": patterns.block_diagonal(Lq, Lk, diagonal_block=3, **kw),
        "sliding_window": patterns.sliding_window(Lq, Lk, window=3, **kw),
        "streaming": patterns.streaming(Lq, Lk, sink=1, window=2, **kw),
        "strided": patterns.strided(Lq, Lk, stride=2, **kw),
        "fixed": patterns.fixed(Lq, Lk, stride=4, summary=1, **kw),
        "dilated": patterns.dilated(Lq, Lk, segments=[4], rates=[2], num_heads=2, **kw),
        "bigbird": patterns.bigbird(Lq, Lk, random_blocks=0, **kw),
        "longformer": patterns.longformer(Lq, Lk, window=2, **kw),
        "custom": patterns.custom(torch.ones(-(-Lq // 4), -(-Lk // 4), dtype=torch.bool), block_size=4,
                                  seq_lengths=(Lq, Lk)),
        "union": patterns.causal(Lq, Lk, **kw) | patterns.strided(Lq, Lk, stride=2, **kw),
        "intersection": patterns.causal(Lq, Lk, **kw) & patterns.sliding_window(Lq, Lk, window=2, **kw),
        "per_head": patterns.per_head([patterns.causal(Lq, Lk, **kw), patterns.dense(Lq, Lk, **kw)]),
    }


@pytest.mark.parametrize("Lq, Lk", LENGTHS)
def test_every_pattern_takes_zero_lengths(Lq, Lk):
    for name, mask in every_pattern(Lq, Lk).items():
        assert (mask.q_len, mask.k_len) == (Lq, Lk), name
        assert mask.num_blocks == 0, name
        assert mask.density == 0.0, name
        assert mask.to_dense().shape == (mask.num_heads, Lq, Lk), name
    assert every_pattern(Lq, Lk)["dilated"].num_heads == 2
    assert every_pattern(Lq, Lk)["per_head"].num_heads == 2


@pytest.mark.parametrize("Lq, Lk", LENGTHS)
def test_attention_through_every_empty_mask(Lq, Lk, rng):
    q, k, v = randn(rng, 2, 2, Lq, 8), randn(rng, 2, 1, Lk, 8), randn(rng, 2, 1, Lk, 8)
    for name, mask in every_pattern(Lq, Lk).items():
        out, lse = spattn.attention(q, k, v, mask, return_lse=True)
        assert out.shape == (2, 2, Lq, 8) and lse.shape == (2, 2, Lq), name
        assert torch.all(out == 0), name
        assert torch.all(lse == float("-inf")), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_zero_batch_heads_and_lengths_without_a_mask(dtype, rng):
    for shape_q, shape_k in [((0, 2, 5, 8), (0, 1, 7, 8)), ((1, 0, 5, 8), (1, 1, 7, 8)),
                             ((1, 2, 0, 8), (1, 1, 7, 8)), ((1, 2, 5, 8), (1, 1, 0, 8))]:
        q, k = randn(rng, *shape_q, dtype=dtype), randn(rng, *shape_k, dtype=dtype)
        out, lse = spattn.attention(q, k, k, return_lse=True)
        assert out.shape == q.shape and out.dtype == dtype and lse.shape == q.shape[:3]
        assert torch.all(out == 0) and torch.all(lse == float("-inf"))


def test_builders_keep_their_other_rules_at_zero_length():
    with pytest.raises(ValueError, match=r"random_blocks must be <= the number of blocks \(0\), got 3"):
        patterns.bigbird(0)
    with pytest.raises(ValueError, match=r"global_tokens must be < Lk \(0\), got 0"):
        patterns.longformer(3, 0, window=2, global_tokens=[0])
    with pytest.raises(ValueError, match="seq_len must be >= 0, got -1"):
        patterns.bigbird(-1)


def test_from_dense_with_no_block_rows_or_columns():
    no_rows = spattn.BlockMask.from_dense(torch.ones(0, 3, dtype=torch.bool), block_size=4)
    assert (no_rows.q_len, no_rows.k_len, no_rows.num_blocks) == (0, 12, 0)
    no_cols = spattn.BlockMask.from_dense(torch.ones(2, 3, 0, dtype=torch.bool), block_size=4,
                                          seq_lengths=(10, 0))
    assert (no_cols.q_len, no_cols.k_len, no_cols.num_heads) == (10, 0, 2)
    assert no_cols.to_dense().shape == (2, 10, 0)


@pytest.mark.parametrize("Lq, Lk", LENGTHS)
def test_flex_masks_of_zero_lengths(Lq, Lk):
    flex = create_block_mask(lambda b, h, q, kv: q >= kv, 1, 1, Lq, Lk, device="cpu", BLOCK_SIZE=4)
    mask = spattn.BlockMask.from_flex(flex)
    assert (mask.q_len, mask.k_len, mask.num_blocks) == (Lq, Lk, 0)
    assert tuple(patterns.causal(Lq, Lk, block_size=4).to_flex().seq_lengths) == (Lq, Lk)


def test_varlen_batches_without_rows_or_sequences(rng):
    q = randn(rng, 0, 2, 8)
    for cu in (torch.zeros(1, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)):
        out, lse = spattn.attention_varlen(q, q[:, :1], q[:, :1], cu, cu, 0, 0, patterns.causal(0),
                                           return_lse=True)
        assert out.shape == (0, 2, 8) and lse.shape == (2, 0)
    rows = randn(rng, 5, 2, 8)
    no_sequences = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"a batch of no sequences \(num_seqs=0\) has no rows, got total_q=5"):
        spattn.attention_varlen(rows, rows, rows, no_sequences, no_sequences, 5, 5)


@pytest.mark.parametrize("Lq, Lk", [(0, 9), (9, 0)])
def test_gradients_of_empty_problems_are_zero(Lq, Lk, rng):
    q = randn(rng, 1, 2, Lq, 8).requires_grad_()
    k, v = (randn(rng, 1, 1, Lk, 8).requires_grad_() for _ in range(2))
    out, lse = spattn.attention(q, k, v, patterns.causal(Lq, Lk, block_size=4), return_lse=True)
    (out.sum() + lse.clamp(min=0).sum()).backward()
    for name, t in (("q", q), ("k", k), ("v", v)):
        assert t.grad is not None and t.grad.shape == t.shape, name
        assert torch.all(t.grad == 0), name
