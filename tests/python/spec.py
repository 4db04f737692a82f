"""Independent statement of every pattern, for the Python tests.

Each function returns the token-level boolean mask (H, Lq, Lk) of a pattern,
written straight from the table in docs/patterns.md with torch broadcasting
(query row i at position p = i + Lk - Lq, key j, head h); nothing here calls
the library, except that BigBird's random blocks are read from the encoded
pattern (they come from the library's documented generator). The reference
attention is computed densely in float64 from such a mask.
"""
import math

import torch


def grid(q_len, k_len, heads=1):
    i = torch.arange(q_len).view(1, -1, 1)
    j = torch.arange(k_len).view(1, 1, -1)
    h = torch.arange(heads).view(-1, 1, 1)
    return h, i, i + (k_len - q_len), j


def expand(mask, heads, q_len, k_len):
    return mask.expand(heads, q_len, k_len).clone()


def dense(q_len, k_len, causal=False, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    m = torch.ones(1, 1, 1, dtype=torch.bool)
    return expand(m & (j <= p) if causal else m, heads, q_len, k_len)


def block_diagonal(q_len, k_len, block, causal=False, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    m = torch.div(p, block, rounding_mode="floor") == torch.div(j, block, rounding_mode="floor")
    return expand(m & (j <= p) if causal else m, heads, q_len, k_len)


def sliding_window(q_len, k_len, left, right, causal=False, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    m = (p - left <= j) & (j <= p + right)
    return expand(m & (j <= p) if causal else m, heads, q_len, k_len)


def streaming(q_len, k_len, sink, window, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    return expand((j <= p) & ((j < sink) | (p - j < window)), heads, q_len, k_len)


def strided(q_len, k_len, stride, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    return expand((j <= p) & ((p - j < stride) | ((p - j) % stride == 0)), heads, q_len, k_len)


def fixed(q_len, k_len, stride, summary, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    same = torch.div(j, stride, rounding_mode="floor") == torch.div(p, stride, rounding_mode="floor")
    return expand((j <= p) & (same | (j % stride >= stride - summary)), heads, q_len, k_len)


def dilated(q_len, k_len, segments, rates, causal=False, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    m = torch.zeros(heads, q_len, k_len, dtype=torch.bool)
    for w, r in zip(segments, rates):
        same = torch.div(p, w, rounding_mode="floor") == torch.div(j, w, rounding_mode="floor")
        m |= same & (p % r == h % r) & (j % r == h % r)
    return m & (j <= p) if causal else m


def bigbird(q_len, k_len, block, window_blocks, global_blocks, random_table, causal=False, heads=1):
    """random_table: (n, r) int tensor of random key blocks per query block (-1 = unused)."""
    h, i, p, j = grid(q_len, k_len, heads)
    n = math.ceil(k_len / block)
    qb = torch.div(p, block, rounding_mode="floor").expand(1, q_len, k_len)
    kb = torch.div(j, block, rounding_mode="floor").expand(1, q_len, k_len)
    half = (window_blocks - 1) // 2
    g = global_blocks
    row_in = (qb >= 0) & (qb < n)
    m = ((qb - kb).abs() <= half) | (kb < g) | (kb >= n - g) | (row_in & ((qb < g) | (qb >= n - g)))
    for row in range(n):
        for c in random_table[row].tolist():
            if c >= 0:
                m |= (qb == row) & (kb == c)
    m = m & (j <= p) if causal else m
    return expand(m, heads, q_len, k_len)


def longformer(q_len, k_len, window, global_tokens, causal=False, heads=1):
    h, i, p, j = grid(q_len, k_len, heads)
    tokens = torch.tensor(list(global_tokens), dtype=torch.int64)
    j_global = torch.isin(j, tokens)
    p_global = torch.isin(p, tokens)
    m = ((p - j).abs() <= window // 2) | j_global | p_global
    return expand(m & (j <= p) if causal else m, heads, q_len, k_len)


def custom(blocks, block_q, block_k, q_len, k_len, causal=False):
    """blocks: (H, nqb, nkb) bool."""
    heads = blocks.shape[0]
    h, i, p, j = grid(q_len, k_len, heads)
    m = blocks[h, torch.div(i, block_q, rounding_mode="floor"), torch.div(j, block_k, rounding_mode="floor")]
    return m & (j <= p) if causal else m


def randn(rng, *shape, dtype=torch.float64, device="cpu"):
    """Standard normal values drawn in float64 from `rng`, then cast."""
    return torch.randn(*shape, generator=rng, dtype=torch.float64).to(dtype=dtype, device=device)


def reference_attention(q, k, v, allowed, scale=None):
    """float64 masked softmax attention; `allowed` (H or 1, Lq, Lk). Empty rows: out 0, lse -inf.

    The output comes from torch's scaled_dot_product_attention with the
    boolean mask (rows with no allowed key, where SDPA has no defined value,
    are set to 0); the LSE from logsumexp of the masked scores.
    """
    q64, k64, v64 = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k64 = k64.repeat_interleave(group, dim=1)
    v64 = v64.repeat_interleave(group, dim=1)
    if allowed.shape[0] > 1:
        allowed = allowed.view(1, *allowed.shape)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    empty = ~allowed.any(dim=-1)
    out = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, attn_mask=allowed, scale=scale)
    out = out.masked_fill(empty.unsqueeze(-1), 0.0)
    scores = (q64 @ k64.transpose(-1, -2)) * scale
    lse = scores.masked_fill(~allowed, float("-inf")).logsumexp(dim=-1)
    return out, lse
