"""CUDA tensors (marker gpu; skipped without a CUDA device or a CUDA build).

The CUDA kernel against the float64 reference (bf16 and fp16, several
patterns, GQA, (B, L, H, D) views, Lq != Lk), CUDA graph capture and replay
(with a mask and without), no host synchronisation in repeated calls,
torch.compile, and the errors of the CUDA backend.
"""
import pytest
import torch

import spattn
from spattn import patterns

from spec import randn, reference_attention
from test_attention import case

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 3e-3}


def check_close(out, lse, ref_out, ref_lse, dtype):
    out, lse = out.cpu().double(), lse.cpu().double()
    assert not torch.isnan(out).any()
    error = (out - ref_out).norm() / ref_out.norm().clamp_min(1e-30)
    assert error.item() < TOLERANCE[dtype], f"relative error {error.item():.2e}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", ["dense", "causal", "sliding_window", "streaming", "dilated", "bigbird",
                                  "longformer", "custom", "union", "per_head"])
@pytest.mark.parametrize("shape", [(300, 300, 64), (129, 517, (32, 128))], ids=["L300", "Lq129-Lk517"])
def test_cuda_matches_the_float64_reference(name, shape, dtype, rng):
    Lq, Lk, block = shape
    B, Hq, Hkv, D = 2, 4, 2, 64
    mask, allowed = case(name, Lq, Lk, block, Hq)
    q, k, v = randn(rng, B, Hq, Lq, D), randn(rng, B, Hkv, Lk, D), randn(rng, B, Hkv, Lk, D)
    # A host mask given with CUDA tensors is moved to their device once and kept with the mask.
    out, lse = spattn.attention(q.to("cuda", dtype), k.to("cuda", dtype), v.to("cuda", dtype),
                                mask.to("cuda") if Lq == Lk else mask, return_lse=True)
    assert out.dtype == dtype and out.is_cuda
    ref_out, ref_lse = reference_attention(q.to(dtype), k.to(dtype), v.to(dtype), allowed)
    check_close(out, lse, ref_out, ref_lse, dtype)


@pytest.mark.parametrize("head_dim", [32, 96, 128, 256])
def test_head_dims_and_blhd_views(head_dim, rng):
    B, L, H = 1, 333, 4
    x = randn(rng, B, L, 3, H, head_dim, dtype=torch.bfloat16, device="cuda")
    q, k, v = (x[:, :, n].transpose(1, 2) for n in range(3))
    mask = patterns.streaming(L, sink=16, window=100, block_size=64, device="cuda")
    out, lse = spattn.attention(q, k, v, mask, return_lse=True)
    assert out.transpose(1, 2).is_contiguous()  # (B, L, H, D) memory order, like q
    ref_out, ref_lse = reference_attention(q.cpu(), k.cpu(), v.cpu(), mask.to_dense().cpu())
    check_close(out, lse, ref_out, ref_lse, torch.bfloat16)


def test_cuda_graph_capture_and_replay(rng):
    mask = patterns.sliding_window(512, window=128, block_size=64, device="cuda")
    q, k, v = (randn(rng, 1, 8, 512, 128, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    spattn.attention(q, k, v, mask)  # first use: the mask's device plan is made here
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = spattn.attention(q, k, v, mask)
    for _ in range(2):
        q.copy_(randn(rng, 1, 8, 512, 128, dtype=torch.bfloat16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, spattn.attention(q, k, v, mask), rtol=0, atol=0)


def test_dense_call_without_a_mask_is_captured_in_a_cuda_graph(rng):
    q, k, v = (randn(rng, 2, 4, 300, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    spattn.attention(q, k, v)  # the shape's first call: the dense mask and its plan are made here
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = spattn.attention(q, k, v)
    q.copy_(randn(rng, 2, 4, 300, 64, dtype=torch.bfloat16, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    error = (captured.double() - expected).norm() / expected.norm()
    assert error.item() < TOLERANCE[torch.bfloat16]


def test_repeated_calls_make_no_host_synchronisation(rng):
    mask = patterns.streaming(1024, sink=64, window=256, block_size=64, device="cuda")
    q, k, v = (randn(rng, 1, 4, 1024, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    calls = (lambda: spattn.attention(q, k, v, mask), lambda: spattn.attention(q, k, v),
             lambda: spattn.dynamic_attention(q, k, v, topk=4, block_size=128, causal=True))
    for call in calls:
        call()  # the first call of each makes what later calls find
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for call in calls:
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
def test_first_use_inside_a_capture_is_an_error(rng):
    mask = patterns.causal(256, block_size=64, device="cuda")
    q = randn(rng, 1, 2, 256, 64, dtype=torch.float16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="first time while a CUDA graph is being captured"):
        with torch.cuda.graph(graph):
            spattn.attention(q, q, q, mask)


def test_torch_compile_on_cuda(rng):
    torch._dynamo.reset()
    mask = patterns.causal(200, block_size=64, device="cuda")
    q, k, v = (randn(rng, 2, 4, 200, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    compiled = torch.compile(lambda q, k, v: spattn.attention(q, k, v, mask) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), spattn.attention(q, k, v, mask) * 2)


def test_cuda_errors(rng):
    mask = patterns.causal(128, block_size=64, device="cuda")
    q = randn(rng, 1, 2, 128, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="needs CPU tensors"):
        spattn.attention(q, q, q, mask, backend="cpu")
    # A mask on the CPU is moved to q's device once and kept with the mask.
    on_cpu = patterns.causal(128, block_size=64)
    torch.testing.assert_close(spattn.attention(q, q, q, on_cpu), spattn.attention(q, q, q, mask))
    assert on_cpu._on(q.device) is on_cpu._on(q.device)
    odd = randn(rng, 1, 2, 128, 48, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="head"):
        spattn.attention(odd, odd, odd, mask)
