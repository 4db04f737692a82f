"""KV caches for the attention_with_kvcache tests, and their float64 oracle.

make_cache draws every sequence's keys and values in order (kept by the test,
never read back from the cache) and lays the cached part out in shuffled
pages (or contiguous rows); the rest of the cache is NaN. expected is
float64 attention over each sequence's keys in order, on the host.
"""
import torch

import spec
from spec import randn


def make_cache(rng, cached, new_len, page_size, dtype, kv_heads, dim, paged=True, device="cpu"):
    """(k_cache, v_cache, page_table, keys, values, k_new, v_new): caches, table and new rows on `device`,
    each sequence's full keys and values (cached + new, in order) on the host."""
    B = len(cached)
    max_pages = max(c + new_len for c in cached) // page_size + 2
    keys = [randn(rng, c + new_len, kv_heads, dim).to(dtype) for c in cached]
    values = [randn(rng, c + new_len, kv_heads, dim).to(dtype) for c in cached]
    k_new = torch.stack([k[c:] for k, c in zip(keys, cached)]).to(device) if new_len else None
    v_new = torch.stack([v[c:] for v, c in zip(values, cached)]).to(device) if new_len else None
    if paged:
        pages = B * max_pages
        table = torch.randperm(pages, generator=rng).to(torch.int32).reshape(B, max_pages)
        k_cache = torch.full((pages, page_size, kv_heads, dim), float("nan"), dtype=dtype)
        v_cache = torch.full((pages, page_size, kv_heads, dim), float("nan"), dtype=dtype)
        for b, c in enumerate(cached):
            for start in range(0, c, page_size):
                end = min(c, start + page_size)
                k_cache[table[b, start // page_size], :end - start] = keys[b][start:end]
                v_cache[table[b, start // page_size], :end - start] = values[b][start:end]
        table = table.to(device)
    else:
        table = None
        k_cache = torch.full((B, max_pages * page_size, kv_heads, dim), float("nan"), dtype=dtype)
        v_cache = torch.full((B, max_pages * page_size, kv_heads, dim), float("nan"), dtype=dtype)
        for b, c in enumerate(cached):
            k_cache[b, :c], v_cache[b, :c] = keys[b][:c], values[b][:c]
    return k_cache.to(device), v_cache.to(device), table, keys, values, k_new, v_new


def expected(q, keys, values, allowed_of):
    """float64 out (B, Lq, Hq, D) and lse (B, Hq, Lq), each sequence alone, on the host."""
    outs, lses = [], []
    q = q.cpu()
    for b in range(q.shape[0]):
        qb = q[b:b + 1].transpose(1, 2).double()
        kb = keys[b].transpose(0, 1).unsqueeze(0).double()
        vb = values[b].transpose(0, 1).unsqueeze(0).double()
        out, lse = spec.reference_attention(qb, kb, vb, allowed_of(q.shape[1], kb.shape[2]))
        outs.append(out.transpose(1, 2))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)
