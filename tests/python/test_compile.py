"""torch.compile(fullgraph=True) traces spattn.attention through its fake kernel.

Few and small on purpose: compiling on the CPU is slow. The graphs hold only
the operator (and views), so Inductor generates no C++ code.
"""
import torch

import spattn
from spattn import patterns

from spec import randn


def test_compiled_attention_matches_eager_without_graph_breaks(rng):
    torch._dynamo.reset()
    mask = patterns.streaming(100, sink=4, window=16, block_size=32)
    q, k, v = randn(rng, 1, 4, 100, 16, dtype=torch.float32), *(randn(rng, 1, 2, 100, 16, dtype=torch.float32) for _ in range(2))

    def run(q, k, v):
        return spattn.attention(q, k, v, mask, return_lse=True)

    explanation = torch._dynamo.explain(run)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(run, fullgraph=True)
    out, lse = compiled(q, k, v)
    ref_out, ref_lse = run(q, k, v)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)


def test_compiled_blhd_views_and_dense_default(rng):
    torch._dynamo.reset()
    x = randn(rng, 2, 37, 3, 16, dtype=torch.float32)  # (B, L, H, D)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def run(x):
        t = x.transpose(1, 2)
        return spattn.attention(t, t, t, scale=0.5)

    out = run(x)
    t = x.transpose(1, 2)
    torch.testing.assert_close(out, spattn.attention(t, t, t, scale=0.5), rtol=0, atol=0)
    assert out.stride() == t.stride()


def test_compiled_backward_matches_eager(rng):
    torch._dynamo.reset()
    mask = patterns.causal(64, block_size=16)
    q, k, v = (randn(rng, 1, 2, 64, 16, dtype=torch.float32).requires_grad_() for _ in range(3))

    @torch.compile(fullgraph=True, backend="aot_eager")
    def loss(q, k, v):
        return spattn.attention(q, k, v, mask).square().sum()

    loss(q, k, v).backward()
    compiled = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    spattn.attention(q, k, v, mask).square().sum().backward()
    for got, t in zip(compiled, (q, k, v)):
        torch.testing.assert_close(got, t.grad, rtol=0, atol=0)
