"""spattn.attention_with_kvcache on CPU tensors: paged and contiguous caches.

Each sequence's result equals float64 attention over its keys laid out in
order (kept by the test, never read back from the cache) with the pattern at
its own lengths; new keys land in the cache at the sequence's length; a
streaming decode works with the middle pages freed (page-table entries -1,
their contents NaN); bad arguments raise errors that name them.
"""
import pytest
import torch

import spattn
from spattn import patterns

import kvcache_cases
import spec
from kvcache_cases import expected
from spec import randn

HQ, HKV, D = 4, 2, 16


def make_cache(rng, cached, new_len, page_size, dtype, paged=True):
    return kvcache_cases.make_cache(rng, cached, new_len, page_size, dtype, HKV, D, paged=paged)


CASES = {
    "dense": (None, lambda lq, lk: spec.dense(lq, lk)),
    "causal": (patterns.causal(64, block_size=16), lambda lq, lk: spec.dense(lq, lk, causal=True)),
    "streaming": (patterns.streaming(64, sink=4, window=32, block_size=16),
                  lambda lq, lk: spec.streaming(lq, lk, 4, 32)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("paged", [True, False], ids=["paged", "contiguous"])
@pytest.mark.parametrize("q_len", [1, 5], ids=["decode", "chunk"])
def test_matches_float64_attention_and_appends(name, paged, q_len, rng):
    mask, allowed_of = CASES[name]
    cached = [37, 0, 150]
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, cached, q_len, 16, torch.float32, paged)
    q = randn(rng, 3, q_len, HQ, D, dtype=torch.float32)
    out, lse = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                             cache_seqlens=torch.tensor(cached, dtype=torch.int32),
                                             page_table=table, mask=mask, return_lse=True)
    want_out, want_lse = expected(q, keys, values, allowed_of)
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-4)
    for b, c in enumerate(cached):  # the new rows are in the cache now
        for r in range(q_len):
            j = c + r
            where = (table[b, j // 16], j % 16) if paged else (b, j)
            assert torch.equal(k_cache[where], keys[b][j]) and torch.equal(v_cache[where], values[b][j])


def test_streaming_decode_with_the_middle_pages_freed(rng):
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, [2000], 1, 16, torch.float32)
    for page in range(1, 121):  # never kept by sink 4 + window 48 at position 2000
        k_cache[table[0, page]] = float("nan")
        table[0, page] = -1
    q = randn(rng, 1, 1, HQ, D, dtype=torch.float32)
    mask = patterns.streaming(64, sink=4, window=48, block_size=16)
    out = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=2000, page_table=table,
                                        mask=mask)
    want, _ = expected(q, keys, values, lambda lq, lk: spec.streaming(lq, lk, 4, 48))
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_bf16_paged_equals_contiguous(rng):
    state = rng.get_state()
    paged = make_cache(rng, [40, 17, 99], 3, 32, torch.bfloat16, paged=True)
    rng.set_state(state)
    flat = make_cache(rng, [40, 17, 99], 3, 32, torch.bfloat16, paged=False)
    q = randn(rng, 3, 3, HQ, D, dtype=torch.bfloat16)
    mask = patterns.sliding_window(64, window=24, block_size=32)
    seqlens = torch.tensor([40, 17, 99], dtype=torch.int32)
    a = spattn.attention_with_kvcache(q, paged[0], paged[1], paged[5], paged[6], cache_seqlens=seqlens,
                                      page_table=paged[2], mask=mask)
    b = spattn.attention_with_kvcache(q, flat[0], flat[1], flat[5], flat[6], cache_seqlens=seqlens, mask=mask)
    assert torch.equal(a, b)


def test_bad_arguments_are_named(rng):
    k_cache, v_cache, table, _, _, k_new, v_new = make_cache(rng, [20, 5], 2, 16, torch.float32)
    q = randn(rng, 2, 2, HQ, D, dtype=torch.float32)
    seqlens = torch.tensor([20, 5], dtype=torch.int32)
    with pytest.raises(TypeError, match="page_table dtype must be torch.int32"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,
                                      page_table=table.long())
    with pytest.raises(ValueError, match="but its cache holds"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=torch.tensor(
            [table.shape[1] * 16, 5], dtype=torch.int32), page_table=table)
    with pytest.raises(ValueError, match="give both or neither"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, cache_seqlens=seqlens, page_table=table)
    with pytest.raises(TypeError, match="k_cache dtype"):
        spattn.attention_with_kvcache(q, k_cache.double(), v_cache, cache_seqlens=seqlens, page_table=table)
    with pytest.raises(ValueError, match="depends on the sequence lengths"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, page_table=table,
                                      mask=patterns.bigbird(64, window_blocks=1, random_blocks=1, block_size=16))


def test_quest_decode_chooses_pages_and_keeps_summaries(rng):
    page = 16
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, [1000], 1, page, torch.float32)
    q = randn(rng, 1, 1, HQ, D, dtype=torch.float32)
    # One page far back holds keys along q's direction: its bound, and its true score, stand out.
    for h in range(HKV):
        keys[0][400:416, h] = 12.0 * q[0, 0, 2 * h] / q[0, 0, 2 * h].norm()
    for j in range(400, 416):
        k_cache[table[0, j // page], j % page] = keys[0][j]
    lo, hi = spattn.page_summaries(k_cache, [1000], table)
    chosen = spattn.select_pages(q, lo, hi, torch.tensor([1000], dtype=torch.int32), table, page_size=page, topk=3)
    assert chosen.shape == (1, HKV, 3) and chosen.dtype == torch.int32
    for h in range(HKV):  # the sink page, page 25 (keys 400..415) and the last page
        assert chosen[0, h].tolist() == [0, 25, 62], chosen
    out, lse = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=1000, page_table=table,
                                             pages=chosen, page_min=lo, page_max=hi, return_lse=True)
    # The oracle: the keys of the chosen pages and of the page the new key lands in (62), causal.
    allowed = torch.zeros(1, 1001, dtype=torch.bool)
    for p in (0, 25, 62):
        allowed[0, p * page:(p + 1) * page] = True
    want_out, want_lse = expected(q, keys, values, lambda lq, lk: allowed[:, :lk].expand(lq, lk).unsqueeze(0))
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-4, atol=1e-4)
    # The append kept the summaries: equal to those made afresh over 1001 keys.
    fresh_lo, fresh_hi = spattn.page_summaries(k_cache, [1001], table)
    assert torch.equal(lo, fresh_lo) and torch.equal(hi, fresh_hi)


def test_every_page_chosen_equals_dense_attention(rng):
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, [37, 150], 2, 16, torch.float32)
    q = randn(rng, 2, 2, HQ, D, dtype=torch.float32)
    seqlens = torch.tensor([37, 150], dtype=torch.int32)
    lo, hi = spattn.page_summaries(k_cache, seqlens, table)
    chosen = spattn.select_pages(q, lo, hi, seqlens, table, page_size=16, topk=table.shape[1])
    assert (chosen[0] >= 0).sum(-1).tolist() == [3, 3] and (chosen[1] >= 0).sum(-1).tolist() == [10, 10]
    out = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, page_table=table,
                                        pages=chosen)
    want, _ = expected(q, keys, values, lambda lq, lk: spec.dense(lq, lk, causal=True))
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_chosen_pages_errors_are_named(rng):
    k_cache, v_cache, table, _, _, k_new, v_new = make_cache(rng, [37], 1, 16, torch.float32)
    q = randn(rng, 1, 1, HQ, D, dtype=torch.float32)
    bad = torch.tensor([[[0, 9], [0, 1]]], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"pages\[0\]\[0\]\[1\]=9 is not a page of sequence 0"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=37, page_table=table,
                                      pages=bad)
    with pytest.raises(ValueError, match="give a mask or chosen pages, not both"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=37, page_table=table, pages=bad,
                                      mask=patterns.causal(64, block_size=16))
    with pytest.raises(ValueError, match="topk must be an int >= 1"):
        spattn.select_pages(q, k_cache[:, 0], k_cache[:, 0], torch.tensor([37]), table, page_size=16, topk=0)


def brute_force_pages(q, lo, hi, lengths, table, page_size, topk, sink, local):
    """select_pages written out page by page: the bound of every page, the forced ones first."""
    B, Lq, Hq, D = q.shape
    Hkv = lo.shape[1]
    group = Hq // Hkv
    chosen = torch.full((B, Hkv, topk), -1, dtype=torch.int32)
    for b in range(B):
        used = -(-int(lengths[b]) // page_size)
        for g in range(Hkv):
            scored = []
            for p in range(used):
                page = int(table[b, p])
                bound = max(float(torch.maximum(q[b, i, h] * lo[page, g], q[b, i, h] * hi[page, g]).sum())
                            for i in range(Lq) for h in range(g * group, (g + 1) * group))
                forced = p < sink or p >= used - local
                scored.append((0 if forced else 1, -bound, p))
            picked = sorted(p for _, _, p in sorted(scored)[:topk])
            chosen[b, g, :len(picked)] = torch.tensor(picked, dtype=torch.int32)
    return chosen


@pytest.mark.parametrize("topk,sink,local", [(1, 0, 0), (4, 1, 1), (6, 2, 3), (40, 1, 1)])
def test_select_pages_equals_a_brute_force_selector(topk, sink, local, rng):
    k_cache, _, table, _, _, _, _ = make_cache(rng, [37, 0, 150, 16], 0, 16, torch.float32)
    lengths = torch.tensor([37, 0, 150, 16], dtype=torch.int32)
    lo, hi = spattn.page_summaries(k_cache, lengths, table)
    q = randn(rng, 4, 2, HQ, D, dtype=torch.float32)
    got = spattn.select_pages(q, lo, hi, lengths, table, page_size=16, topk=topk, sink_pages=sink,
                              local_pages=local)
    assert torch.equal(got, brute_force_pages(q, lo, hi, lengths, table, 16, topk, sink, local))


def test_summaries_follow_many_appends(rng):
    k_cache, v_cache, table, _, _, _, _ = make_cache(rng, [5, 30], 50, 8, torch.float32)  # room for 50 more
    lengths = torch.tensor([5, 30], dtype=torch.int32)
    lo, hi = spattn.page_summaries(k_cache, lengths, table)
    for step in range(23):  # decode steps, one then three new keys, over page boundaries
        new = 1 if step % 2 else 3
        k, v = randn(rng, 2, new, HKV, D, dtype=torch.float32), randn(rng, 2, new, HKV, D, dtype=torch.float32)
        q = randn(rng, 2, new, HQ, D, dtype=torch.float32)
        spattn.attention_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, page_table=table,
                                      mask=patterns.causal(8, block_size=8), page_min=lo, page_max=hi)
        lengths += new
    fresh_lo, fresh_hi = spattn.page_summaries(k_cache, lengths, table)
    used = set()
    for b in range(2):
        used |= {int(table[b, p]) for p in range(-(-int(lengths[b]) // 8))}
    for page in used:
        assert torch.equal(lo[page], fresh_lo[page]) and torch.equal(hi[page], fresh_hi[page]), page
