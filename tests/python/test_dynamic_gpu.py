"""spattn.dynamic_attention and select_blocks on CUDA tensors: the device operators (marker gpu).

With mean pooling and blocks that fit the fused kernel's tile the selection
and the attention run on the device (spattn::dynamic_attention). Its output
is compared with the float64 reference on the masks the host selector
chooses for the same inputs, which are built so that block scores differ
clearly (the device scores in fp32, the host in fp64: only near ties could
differ). The device selection (spattn::select_blocks_device, mean pooling
and antidiagonal sampling) gives the host's masks on the same inputs. Then
CUDA graph capture and replay, torch.compile without graph breaks, and the
error of a first call inside a capture.
"""
import math

import pytest
import torch

import spattn

from spec import randn, reference_attention
from test_dynamic import query_head_mask
from test_gpu import check_close

pytestmark = pytest.mark.gpu


def separated_qk(rng, B, Hq, Hkv, Lq, Lk, D, block_k, dtype):
    """q and k whose key blocks score far apart: every key of block c of kv
    head h carries gain[b, h, c] times a shared direction that every query
    holds, with the gains a random permutation of evenly spaced values."""
    nkb = -(-Lk // block_k)
    u = randn(rng, B, 1, 1, D)
    u = 4 * u / u.norm(dim=-1, keepdim=True)
    order = torch.stack([torch.randperm(nkb, generator=rng) for _ in range(B * Hkv)]).view(B, Hkv, nkb)
    gains = (3.0 * order / max(nkb - 1, 1)).double()
    per_key = gains.repeat_interleave(block_k, dim=2)[:, :, :Lk, None]
    q = randn(rng, B, Hq, Lq, D) + u
    k = randn(rng, B, Hkv, Lk, D) + per_key * u
    return q.to("cuda", dtype), k.to("cuda", dtype)


CASES = [  # (B, Hq, Hkv, Lq, Lk, dtype, selection keywords)
    (2, 4, 2, 1000, 1000, torch.bfloat16, dict(topk=3, causal=True)),
    (1, 4, 4, 1000, 1000, torch.float16, dict(tau=0.8, block_size=(128, 64))),
    (2, 4, 1, 300, 1000, torch.bfloat16, dict(tau=0.9, causal=True, sink_blocks=0, max_blocks=4)),
    (1, 4, 2, 777, 777, torch.bfloat16, dict(topk=2, block_size=(256, 128), causal=True, per_query_head=True)),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{n}" for n in range(len(CASES))])
def test_device_operator_matches_the_reference_on_the_host_selection(case, rng):
    B, Hq, Hkv, Lq, Lk, dtype, select = case
    D = 128
    block_k = select.get("block_size", 128)
    block_k = block_k[1] if isinstance(block_k, tuple) else block_k
    q, k = separated_qk(rng, B, Hq, Hkv, Lq, Lk, D, block_k, dtype)
    v = randn(rng, B, Hkv, Lk, D, dtype=dtype, device="cuda")
    out, lse = spattn.dynamic_attention(q, k, v, return_lse=True, **select)
    assert out.is_cuda and out.dtype == dtype and lse.shape == (B, Hq, Lq)
    masks = spattn.select_blocks_batched(q.cpu(), k.cpu(), **select)
    for b, mask in enumerate(masks):
        allowed = query_head_mask(mask, Hq)
        assert allowed.sum() < allowed.numel()  # the selection is sparse here
        ref_out, ref_lse = reference_attention(q[b:b + 1].cpu(), k[b:b + 1].cpu(), v[b:b + 1].cpu(), allowed)
        check_close(out[b:b + 1], lse[b:b + 1], ref_out, ref_lse, dtype)


SELECT_CASES = [  # (B, Hq, Hkv, Lq, Lk, dtype, selection keywords): masks equal to the host's
    (2, 4, 2, 1000, 1000, torch.bfloat16, dict(topk=3, causal=True)),
    (1, 4, 4, 700, 900, torch.float16, dict(tau=0.8, block_size=(64, 32), per_query_head=True)),
    (2, 4, 1, 300, 1000, torch.float32, dict(tau=0.9, causal=True, sink_blocks=0, min_blocks=2, max_blocks=4)),
    (1, 4, 2, 1024, 1024, torch.bfloat16, dict(topk=3, causal=True, stride=8)),
    (1, 2, 2, 512, 512, torch.bfloat16, dict(tau=1.0, causal=True, block_size=64)),
]


@pytest.mark.parametrize("case", SELECT_CASES, ids=[f"case{n}" for n in range(len(SELECT_CASES))])
def test_select_blocks_on_the_device_matches_the_host(case, rng):
    B, Hq, Hkv, Lq, Lk, dtype, select = case
    block_k = select.get("block_size", 128)
    block_k = block_k[1] if isinstance(block_k, tuple) else block_k
    q, k = separated_qk(rng, B, Hq, Hkv, Lq, Lk, 128, block_k, dtype)
    got = spattn.select_blocks_batched(q, k, **select)
    want = spattn.select_blocks_batched(q.cpu(), k.cpu(), **select)
    assert len(got) == B
    for mask, host in zip(got, want):
        assert mask.device.type == "cuda"
        assert mask.num_heads == host.num_heads
        assert torch.equal(mask.row_offsets.cpu(), host.row_offsets)
        assert torch.equal(mask.kv_indices.cpu(), host.kv_indices)
        assert torch.equal(mask.kv_full.cpu(), host.kv_full)
    v = randn(rng, 1, Hkv, Lk, 128, dtype=dtype, device="cuda")
    if dtype != torch.float32:  # the fused kernel reads fp16 and bf16; the mask works as any other
        out = spattn.attention(q[:1], k[:1], v, got[0])
        ref = spattn.attention(q[:1], k[:1], v, want[0].to("cuda"))
        torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_select_blocks_on_the_device_is_one_call_per_batch(rng):
    q, k = separated_qk(rng, 1, 4, 2, 640, 640, 128, 128, torch.bfloat16)
    mask = spattn.select_blocks(q, k, topk=2, causal=True)
    assert mask.device.type == "cuda" and mask.num_blocks == int(mask.row_offsets[-1])
    fp64 = spattn.select_blocks(q.double(), k.double(), topk=2, causal=True)  # selected on the host
    assert fp64.device.type == "cuda" and torch.equal(fp64.kv_indices.cpu(), mask.kv_indices.cpu())


def test_device_operator_replays_in_a_cuda_graph(rng):
    q, k = separated_qk(rng, 1, 8, 2, 1024, 1024, 128, 128, torch.bfloat16)
    v = randn(rng, 1, 2, 1024, 128, dtype=torch.bfloat16, device="cuda")
    select = dict(tau=0.9, causal=True, max_blocks=6)
    spattn.dynamic_attention(q, k, v, **select)  # first call: the operator's buffers are made here
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = spattn.dynamic_attention(q, k, v, **select)
    for _ in range(2):
        fresh_q, fresh_k = separated_qk(rng, 1, 8, 2, 1024, 1024, 128, 128, torch.bfloat16)
        q.copy_(fresh_q)
        k.copy_(fresh_k)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(captured, spattn.dynamic_attention(q, k, v, **select), rtol=0, atol=0)


def test_device_operator_compiles_without_graph_breaks(rng):
    torch._dynamo.reset()
    q, k = separated_qk(rng, 1, 4, 2, 512, 512, 128, 128, torch.bfloat16)
    v = randn(rng, 1, 2, 512, 128, dtype=torch.bfloat16, device="cuda")

    def run(q, k, v):
        return spattn.dynamic_attention(q, k, v, topk=2, causal=True, return_lse=True)

    explanation = torch._dynamo.explain(run)(q, k, v)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    out, lse = torch.compile(run, fullgraph=True, backend="aot_eager")(q, k, v)
    ref_out, ref_lse = run(q, k, v)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
def test_first_call_inside_a_capture_is_an_error(rng):
    q = randn(rng, 1, 2, 384, 128, dtype=torch.float16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match="first time with this configuration"):
        with torch.cuda.graph(graph):
            spattn.dynamic_attention(q, q, q, topk=2, scale=0.1 * math.pi)
