"""spattn.select_blocks and spattn.dynamic_attention.

The selection is compared with an independent brute-force selector written
here from the rules of docs/dynamic.md (pooled or antidiagonal block scores,
row softmax over the allowed blocks, forced sink and local blocks, topk or
tau, budgets, ties to the lower index), block by block and with the full /
partial flag of every kept block, over odd shapes, GQA, causal or not, per
query head or per kv head. dynamic_attention is compared with
spattn.attention run with the selected masks and with float64 SDPA given the
masks' dense boolean form. Then the error cases.
"""
import math

import pytest
import torch

import spattn
from spattn import patterns

from spec import randn, reference_attention


def _cdiv(a, b):
    return -(-a // b)


def _block_scores(q, k, b, h, kvh, qb, n, bq, bk, causal, stride, scale):
    """Scores of key blocks [0, n) for query head h, query block qb (float64)."""
    Lq, Lk = q.shape[2], k.shape[2]
    offset = Lk - Lq
    i0, i1 = qb * bq, min((qb + 1) * bq, Lq)
    qh, kh = q[b, h].double(), k[b, kvh].double()
    scores = torch.full((n,), -math.inf, dtype=torch.float64)
    for c in range(n):
        j0, j1 = c * bk, min((c + 1) * bk, Lk)
        if stride == 0:
            scores[c] = qh[i0:i1].mean(0).dot(kh[j0:j1].mean(0)) * scale
            continue
        samples = [qh[i].dot(kh[j]) * scale
                   for i in range(i0, i1) for j in range(j0, min(j1, i + offset + 1) if causal else j1)
                   if ((i - i0) + (j - j0)) % stride == stride - 1]
        if samples:
            scores[c] = torch.logsumexp(torch.stack(samples), 0) - math.log(len(samples))
    return scores


def brute_select(q, k, b, *, topk=None, tau=None, block_size=16, sink_blocks=1, local_blocks=2,
                 min_blocks=0, max_blocks=0, stride=0, causal=False, per_query_head=False, scale=None):
    """{(mask_head, qb): [(kb, full), ...] ascending} for batch element b."""
    Lq, Lk, Hq, Hkv, D = q.shape[2], k.shape[2], q.shape[1], k.shape[1], q.shape[3]
    bq, bk = (block_size, block_size) if isinstance(block_size, int) else block_size
    nqb, nkb = _cdiv(Lq, bq), _cdiv(Lk, bk)
    offset, group = Lk - Lq, Hq // Hkv
    scale = 1 / math.sqrt(D) if scale is None else scale
    heads = Hq if per_query_head else Hkv
    chosen = {}
    for qb in range(nqb):
        last = min((qb + 1) * bq, Lq) - 1 + offset
        first = qb * bq + offset
        n = nkb if not causal else (0 if last < 0 else min(last // bk + 1, nkb))
        local_last = min(last // bk, nkb - 1)
        forced = {c for c in range(n)
                  if c < sink_blocks or local_last - local_blocks + 1 <= c <= local_last}
        for mh in range(heads):
            query_heads = [mh] if per_query_head else range(mh * group, (mh + 1) * group)
            probs = torch.zeros(n, dtype=torch.float64)
            for h in query_heads:
                if n:
                    scores = _block_scores(q, k, b, h, h // group, qb, n, bq, bk, causal, stride, scale)
                    if torch.isfinite(scores).any():
                        probs += torch.softmax(scores, 0)
            probs /= len(query_heads)
            others = sorted((c for c in range(n) if c not in forced), key=lambda c: (-probs[c].item(), c))
            if topk is not None:
                wanted = topk
            else:
                mass, taken = sum(probs[c].item() for c in forced), 0
                while (tau >= 1 or mass < tau) and taken < len(others):
                    mass += probs[others[taken]].item()
                    taken += 1
                wanted = len(forced) + taken
            count = max(wanted, len(forced), min_blocks)
            if max_blocks:
                count = min(count, max_blocks)
            count = min(count, n)
            kept = sorted(forced | set(others[:count - len(forced)]))
            chosen[(mh, qb)] = [(c, not (causal and min((c + 1) * bk, Lk) - 1 > first)) for c in kept]
    return chosen


def mask_rows(mask):
    """The same {(mask_head, qb): [(kb, full), ...]} read from a BlockMask's plan."""
    nqb = _cdiv(mask.q_len, mask.block_size[0])
    offsets, indices, full = mask.row_offsets.tolist(), mask.kv_indices.tolist(), mask.kv_full.tolist()
    return {(row // nqb, row % nqb):
            [(indices[at], bool(full[at])) for at in range(offsets[row], offsets[row + 1])]
            for row in range(len(offsets) - 1)}


def query_head_mask(mask, query_heads):
    """The token-level mask (query_heads, Lq, Lk): query head h reads mask head h // (Hq // heads)."""
    return mask.to_dense().repeat_interleave(query_heads // mask.num_heads, dim=0)


def qk(rng, B, Hq, Hkv, Lq, Lk, D, dtype=torch.float64):
    """Inputs whose block scores differ clearly (no near-ties between blocks)."""
    return 3 * randn(rng, B, Hq, Lq, D, dtype=dtype), 3 * randn(rng, B, Hkv, Lk, D, dtype=dtype)


SHAPES = [  # (B, Hq, Hkv, Lq, Lk, D, block_size)
    (1, 2, 2, 77, 77, 8, 16),
    (2, 4, 2, 45, 100, 16, (16, 8)),
    (1, 3, 1, 100, 45, 4, 7),
]
CONFIGS = [
    dict(topk=3),
    dict(topk=2, sink_blocks=0, local_blocks=0),
    dict(tau=0.6),
    dict(tau=0.9, sink_blocks=2, local_blocks=1, min_blocks=3, max_blocks=5),
    dict(topk=4, max_blocks=4, per_query_head=True),
    dict(tau=0.5, per_query_head=True, scale=0.3),
    dict(topk=3, stride=4),
    dict(tau=0.7, stride=3, sink_blocks=0),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
def test_selection_equals_brute_force(rng, shape, config, causal):
    B, Hq, Hkv, Lq, Lk, D, block = shape
    q, k = qk(rng, B, Hq, Hkv, Lq, Lk, D)
    masks = spattn.select_blocks_batched(q, k, block_size=block, causal=causal, **config)
    assert len(masks) == B
    for b, mask in enumerate(masks):
        heads = Hq if config.get("per_query_head") else Hkv
        assert (mask.q_len, mask.k_len, mask.num_heads) == (Lq, Lk, heads)
        assert mask_rows(mask) == brute_select(q, k, b, block_size=block, causal=causal, **config)


def test_selection_reads_any_dtype_and_layout(rng):
    q, k = qk(rng, 1, 4, 2, 64, 80, 16)
    expected = mask_rows(spattn.select_blocks(q, k, topk=3, block_size=16, causal=True))
    q_t = q.transpose(1, 2).contiguous().transpose(1, 2)  # (B, L, H, D) memory read as (B, H, L, D)
    assert not q_t.is_contiguous()
    assert mask_rows(spattn.select_blocks(q_t, k, topk=3, block_size=16, causal=True)) == expected
    low = spattn.select_blocks(q.float(), k.float(), topk=3, block_size=16, causal=True)
    assert low.num_blocks == sum(len(r) for r in expected.values())


@pytest.mark.parametrize("causal", [False, True])
def test_keeping_everything_gives_the_dense_or_causal_mask(rng, causal):
    Lq, Lk, block = 50, 70, (8, 16)
    q, k = qk(rng, 1, 2, 1, Lq, Lk, 8)
    full = patterns.dense(Lq, Lk, causal=causal, block_size=block).to_dense()
    for config in (dict(tau=1.0), dict(topk=_cdiv(Lk, 16))):
        mask = spattn.select_blocks(q, k, block_size=block, causal=causal, **config)
        assert torch.equal(mask.to_dense(), full)


SELECT = dict(topk=3, block_size=16, sink_blocks=1, local_blocks=1)


@pytest.mark.parametrize("causal", [False, True])
def test_dynamic_attention_equals_attention_with_the_selected_masks(rng, causal):
    B, Hq, Hkv, Lq, Lk, D = 2, 4, 2, 61, 93, 16
    q, k = qk(rng, B, Hq, Hkv, Lq, Lk, D)
    v = randn(rng, B, Hkv, Lk, D)
    out, lse, masks = spattn.dynamic_attention(q, k, v, causal=causal, return_lse=True, return_masks=True,
                                               **SELECT)
    assert len(masks) == B and out.shape == q.shape and lse.shape == (B, Hq, Lq)
    for b, mask in enumerate(masks):
        assert mask_rows(mask) == brute_select(q, k, b, causal=causal, **SELECT)
        out_b, lse_b = spattn.attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], mask, return_lse=True)
        assert torch.equal(out[b:b + 1], out_b)
        assert torch.equal(lse[b:b + 1], lse_b)
        allowed = query_head_mask(mask, Hq)
        assert allowed.sum() < allowed.numel()  # the selection is sparse here
        ref_out, ref_lse = reference_attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], allowed)
        torch.testing.assert_close(out_b, ref_out, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(lse_b, ref_lse.float(), rtol=1e-5, atol=1e-5)


def test_dynamic_attention_fast_kernel_views_and_scale(rng):
    B, Hq, Hkv, L, D = 1, 4, 1, 100, 32
    q, k = qk(rng, B, Hq, Hkv, L, L, D, dtype=torch.float32)
    v = randn(rng, B, Hkv, L, D, dtype=torch.float32)
    x = randn(rng, B, L, Hq, D, dtype=torch.float32)  # a (B, L, H, D) buffer read in place as q
    q_view = x.transpose(1, 2)
    out, masks = spattn.dynamic_attention(q_view, k, v, tau=0.8, block_size=(16, 32), causal=True, scale=0.2,
                                          return_masks=True)
    assert out.stride() == q_view.stride()
    expected = spattn.select_blocks(q_view, k, tau=0.8, block_size=(16, 32), causal=True, scale=0.2)
    assert mask_rows(masks[0]) == mask_rows(expected)
    ref_out, _ = reference_attention(q_view, k, v, query_head_mask(expected, Hq), scale=0.2)
    torch.testing.assert_close(out, ref_out.float(), rtol=2e-5, atol=2e-5)


# ---- errors ------------------------------------------------------------------

ERRORS = [  # (keywords, exception, text the message names)
    (dict(), ValueError, "topk and tau"),
    (dict(topk=2, tau=0.5), ValueError, "topk and tau"),
    (dict(topk=0), ValueError, "topk"),
    (dict(topk=2.5), TypeError, "topk"),
    (dict(tau=0.0), ValueError, "tau"),
    (dict(tau=1.5), ValueError, "tau"),
    (dict(tau=float("nan")), ValueError, "tau"),
    (dict(topk=2, block_size=0), ValueError, "block_size"),
    (dict(topk=2, block_size=(16, 8, 4)), ValueError, "block_size"),
    (dict(topk=2, sink_blocks=-1), ValueError, "sink_blocks"),
    (dict(topk=2, local_blocks=-1), ValueError, "local_blocks"),
    (dict(topk=2, min_blocks=-1), ValueError, "min_blocks"),
    (dict(topk=2, max_blocks=-1), ValueError, "max_blocks"),
    (dict(topk=2, min_blocks=4, max_blocks=3), ValueError, "min_blocks"),
    (dict(topk=4, max_blocks=3), ValueError, "max_blocks"),
    (dict(topk=2, sink_blocks=2, local_blocks=2, max_blocks=3), ValueError, "max_blocks"),
    (dict(topk=2, stride=-1), ValueError, "stride"),
    (dict(topk=2, stride=17), ValueError, "stride"),
    (dict(topk=2, causal=1), TypeError, "causal"),
    (dict(topk=2, per_query_head="yes"), TypeError, "per_query_head"),
    (dict(topk=2, scale=float("inf")), ValueError, "scale"),
]


@pytest.mark.parametrize("kwargs,error,text", ERRORS)
def test_bad_parameters_name_the_argument(rng, kwargs, error, text):
    q, k = qk(rng, 1, 2, 1, 40, 40, 8)
    v = randn(rng, 1, 1, 40, 8)
    with pytest.raises(error, match=text):
        spattn.select_blocks(q, k, **{"block_size": 16, **kwargs})
    with pytest.raises(error, match=text):
        spattn.dynamic_attention(q, k, v, **{"block_size": 16, **kwargs})


def test_bad_tensors_name_the_argument(rng):
    q, k = qk(rng, 2, 4, 2, 32, 32, 8)
    with pytest.raises(ValueError, match="select_blocks_batched"):
        spattn.select_blocks(q, k, topk=2, block_size=16)
    with pytest.raises(ValueError, match="q must be 4-D"):
        spattn.select_blocks_batched(q[0], k, topk=2, block_size=16)
    with pytest.raises(TypeError, match="k dtype"):
        spattn.select_blocks_batched(q, k.float(), topk=2, block_size=16)
    with pytest.raises(TypeError, match="q dtype"):
        spattn.select_blocks_batched(q.int(), k, topk=2, block_size=16)
    with pytest.raises(ValueError, match="k batch"):
        spattn.select_blocks_batched(q, k[:1], topk=2, block_size=16)
    with pytest.raises(ValueError, match="multiple of k heads"):
        spattn.select_blocks_batched(q[:, :3], k, topk=2, block_size=16)
    with pytest.raises(ValueError, match="head_dim"):
        spattn.select_blocks_batched(q, k[..., :4], topk=2, block_size=16)
    with pytest.raises(ValueError, match="v seq_len"):
        spattn.dynamic_attention(q, k, k[:, :, :20], topk=2, block_size=16)
    with pytest.raises(TypeError, match="return_masks"):
        spattn.dynamic_attention(q, k, k, topk=2, block_size=16, return_masks=None)
    with pytest.raises(ValueError, match="backend"):
        spattn.dynamic_attention(q, k, k, topk=2, block_size=16, backend="gpu")
