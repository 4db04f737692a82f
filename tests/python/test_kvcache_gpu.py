"""spattn.attention_with_kvcache on CUDA tensors: the device decode kernels.

Every case is checked against float64 attention over each sequence's keys
laid out in order (kept by the test, never read back from the cache) with
the pattern at its own lengths: paged and contiguous caches, page sizes 16
to 256, GQA groups of 1, 3 and 4, decode steps and short chunks, sequences
long enough to be split across many CTAs, new keys appended first. Also: the
cache after the append, the page summaries, chosen pages (Quest) against the
CPU backend, the middle pages of a streaming decode never read, errors
naming the sequence and entry, and a decode step captured in a CUDA graph.
"""
import pytest
import torch

import spattn
from spattn import patterns

import kvcache_cases
import spec
from kvcache_cases import expected
from spec import randn

pytestmark = pytest.mark.gpu

D = 64


def make_cache(rng, cached, new_len, page_size, dtype, hkv, dim=D, paged=True):
    return kvcache_cases.make_cache(rng, cached, new_len, page_size, dtype, hkv, dim, paged=paged, device="cuda")


HQ_OF = {1: 4, 3: 9, 4: 8}  # GQA group -> query heads (kv heads = Hq / group)

CASES = {
    "dense": (lambda hq: None, lambda hq: lambda lq, lk: spec.dense(lq, lk)),
    "causal": (lambda hq: patterns.causal(64, block_size=16),
               lambda hq: lambda lq, lk: spec.dense(lq, lk, causal=True)),
    "window": (lambda hq: patterns.sliding_window(64, window=200, block_size=16),
               lambda hq: lambda lq, lk: spec.sliding_window(lq, lk, 199, 0)),
    "streaming": (lambda hq: patterns.streaming(64, sink=4, window=300, block_size=16),
                  lambda hq: lambda lq, lk: spec.streaming(lq, lk, 4, 300)),
    "dilated": (lambda hq: patterns.dilated(64, segments=[32, 256], rates=[1, 2], causal=True, num_heads=hq,
                                            block_size=16),
                lambda hq: lambda lq, lk: spec.dilated(lq, lk, [32, 256], [1, 2], causal=True, heads=hq)),
}


def check(out, lse, want_out, want_lse, dtype):
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(out.double().cpu(), want_out, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double().cpu(), want_lse, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("paged,page", [(True, 16), (True, 64), (True, 256), (False, 0)],
                         ids=["page16", "page64", "page256", "contiguous"])
@pytest.mark.parametrize("q_len", [1, 5], ids=["decode", "chunk"])
@pytest.mark.parametrize("group", [1, 3, 4])
def test_matches_float64_attention_and_appends(name, paged, page, q_len, group, rng):
    mask_of, allowed_of = CASES[name]
    hq = HQ_OF[group]
    hkv = hq // group
    dtype = torch.bfloat16
    cached = [37, 0, 3000]
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, cached, q_len, page or 16, dtype, hkv,
                                                                     paged=paged)
    q = randn(rng, 3, q_len, hq, D, dtype=dtype, device="cuda")
    out, lse = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                             cache_seqlens=torch.tensor(cached, dtype=torch.int32, device="cuda"),
                                             page_table=table, mask=mask_of(hq), return_lse=True)
    check(out, lse, *expected(q, keys, values, allowed_of(hq)), dtype)
    # The new keys are in the cache at each sequence's length.
    for b, c in enumerate(cached):
        for r in range(q_len):
            j = c + r
            at = (table[b, j // page].item(), j % page) if paged else (b, j)
            assert torch.equal(k_cache[at].cpu(), keys[b][j]) and torch.equal(v_cache[at].cpu(), values[b][j])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [32, 128, 256])
def test_head_dims_and_dtypes(dtype, dim, rng):
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, [700, 5], 1, 32, dtype, 2, dim=dim)
    q = randn(rng, 2, 1, 8, dim, dtype=dtype, device="cuda")
    out, lse = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                             cache_seqlens=torch.tensor([700, 5], dtype=torch.int32, device="cuda"),
                                             page_table=table, return_lse=True)
    check(out, lse, *expected(q, keys, values, lambda lq, lk: spec.dense(lq, lk)), dtype)


def test_streaming_decode_never_reads_the_middle_pages(rng):
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, [20000], 1, 16, torch.bfloat16, 2)
    for page in range(1, 1230):  # never kept by sink 4 + window 48 at position 20000
        k_cache[table[0, page]] = float("nan")
        table[0, page] = -1
    q = randn(rng, 1, 1, 8, D, dtype=torch.bfloat16, device="cuda")
    mask = patterns.streaming(64, sink=4, window=48, block_size=16)
    out = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=20000, page_table=table,
                                        mask=mask)
    want, _ = expected(q, keys, values, lambda lq, lk: spec.streaming(lq, lk, 4, 48))
    torch.testing.assert_close(out.double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_chosen_pages_and_summaries_equal_the_cpu_backend(rng):
    page = 16
    cached = [1000, 333]
    k_cache, v_cache, table, _, _, k_new, v_new = make_cache(rng, cached, 1, page, torch.bfloat16, 2)
    q = randn(rng, 2, 1, 8, D, dtype=torch.bfloat16, device="cuda")
    seqlens = torch.tensor(cached, dtype=torch.int32, device="cuda")
    lo, hi = spattn.page_summaries(k_cache, cached, table)
    chosen = spattn.select_pages(q, lo, hi, seqlens, table, page_size=page, topk=6)
    host = [t.cpu() for t in (q, k_cache, v_cache, k_new, v_new, table, chosen, lo, hi)]
    out = spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens, page_table=table,
                                        pages=chosen, page_min=lo, page_max=hi)
    hq, hk, hv, hkn, hvn, ht, hc, hlo, hhi = host
    want = spattn.attention_with_kvcache(hq, hk, hv, hkn, hvn, cache_seqlens=seqlens.cpu(), page_table=ht,
                                         pages=hc, page_min=hlo, page_max=hhi)
    torch.testing.assert_close(out.float().cpu(), want.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(k_cache.cpu(), hk, rtol=0, atol=0, equal_nan=True)  # unused pages hold NaN
    assert torch.equal(lo.cpu(), hlo) and torch.equal(hi.cpu(), hhi)


def test_decode_step_in_a_cuda_graph(rng):
    cached = [500, 1200]
    k_cache, v_cache, table, keys, values, k_new, v_new = make_cache(rng, cached, 1, 64, torch.bfloat16, 2)
    q = randn(rng, 2, 1, 8, D, dtype=torch.bfloat16, device="cuda")
    seqlens = torch.tensor(cached, dtype=torch.int32, device="cuda")
    mask = patterns.sliding_window(64, window=256, block_size=64)
    call = lambda: spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=seqlens,  # noqa
                                                 page_table=table, mask=mask)
    call()  # the mask's device copy exists before the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = call()
    torch.cuda.current_stream().wait_stream(stream)
    # Each replay reads the lengths on the device: move them back one key and replay.
    seqlens -= 1
    q.copy_(randn(rng, 2, 1, 8, D, dtype=torch.bfloat16, device="cuda"))
    k_new.copy_(torch.stack([k[c - 1:c] for k, c in zip(keys, cached)]))
    v_new.copy_(torch.stack([v[c - 1:c] for v, c in zip(values, cached)]))
    graph.replay()
    torch.cuda.synchronize()
    shorter = [k[:c] for k, c in zip(keys, cached)], [v[:c] for v, c in zip(values, cached)]
    want, _ = expected(q, *shorter, lambda lq, lk: spec.sliding_window(lq, lk, 255, 0))
    torch.testing.assert_close(out.double().cpu(), want, rtol=2e-2, atol=2e-2)


def test_bad_lengths_and_entries_are_named(rng):
    k_cache, v_cache, table, _, _, k_new, v_new = make_cache(rng, [100, 40], 1, 16, torch.bfloat16, 2)
    q = randn(rng, 2, 1, 8, D, dtype=torch.bfloat16, device="cuda")

    def call(seqlens, **kw):
        kw.setdefault("page_table", table)
        return spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                             cache_seqlens=torch.tensor(seqlens, dtype=torch.int32, device="cuda"),
                                             **kw)

    with pytest.raises(ValueError, match=r"sequence 1 needs .* but its cache holds"):
        call([100, table.shape[1] * 16])
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\] must be >= 0, got -3"):
        call([-3, 40])
    broken = table.clone()
    broken[1, 1] = -1
    with pytest.raises(ValueError, match=r"page_table\[1\]\[1\]=-1 is not a page of the cache"):
        call([100, 40], page_table=broken)
    bad_pages = torch.tensor([[[0, 99], [0, 1]], [[0, 1], [0, 1]]], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"pages\[0\]\[0\]\[1\]=99 is not a page of sequence 0"):
        call([100, 40], pages=bad_pages)
    with pytest.raises(ValueError, match="head_dim must be 32, 64, 128 or 256, got 48"):
        spattn.attention_with_kvcache(q[..., :48].contiguous(), k_cache[..., :48].contiguous(),
                                      v_cache[..., :48].contiguous(), cache_seqlens=4, page_table=table)
    with pytest.raises(ValueError, match="cache_seqlens is on cpu but q is on cuda"):
        spattn.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor([4, 4], dtype=torch.int32),
                                      page_table=table)
    # The cache is usable after the errors.
    call([100, 40])
