"""spattn.attention_varlen: packed variable-length batches against each sequence run alone.

The expected result runs the float64 reference on every sequence separately,
with the pattern's mask at that sequence's own length (spec.py), so the
packed mask built for the longest sequence is checked from outside. Empty,
one-token and ragged sequences, chunks of queries after cached keys (fewer
queries than keys, bottom-right aligned), GQA, every prefix-stable pattern,
float64 through the exact reference and float32 through the fast CPU kernel, the
fake kernel under torch.compile, bad arguments; CUDA (marker gpu) in both
half types and head dims 64 and 128, and inside a CUDA graph.
"""
import itertools

import pytest
import torch

import spattn
from spattn import patterns

from spec import randn, reference_attention
from test_attention import case

STABLE = ["dense", "causal", "block_diagonal", "sliding_window", "sliding_window_sides", "streaming",
          "strided", "fixed", "dilated", "union", "intersection", "per_head"]
LENGTHS = [17, 1, 0, 90, 32, 0, 61]


def offsets(lengths, device):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def packed_chunks(rng, q_lengths, k_lengths, Hq, Hkv, D, dtype=torch.float64, device="cpu"):
    """q, k, v, cu_seqlens_q, cu_seqlens_k of sequences with their own query and key counts."""
    q = randn(rng, sum(q_lengths), Hq, D, dtype=dtype, device=device)
    k = randn(rng, sum(k_lengths), Hkv, D, dtype=dtype, device=device)
    v = randn(rng, sum(k_lengths), Hkv, D, dtype=dtype, device=device)
    return q, k, v, offsets(q_lengths, device), offsets(k_lengths, device)


def packed(rng, lengths, Hq, Hkv, D, dtype=torch.float64, device="cpu"):
    """q, k, v and the shared cu_seqlens of sequences with as many queries as keys."""
    return packed_chunks(rng, lengths, lengths, Hq, Hkv, D, dtype, device)[:4]


def expected(name, q, k, v, lengths, block, k_lengths=None):
    """float64 (out (total_q, Hq, D), lse (Hq, total_q)), one sequence at a time."""
    total, Hq, D = q.shape
    out = torch.zeros(total, Hq, D, dtype=torch.float64)
    lse = torch.full((Hq, total), float("-inf"), dtype=torch.float64)
    q_start = k_start = 0
    for length, k_length in zip(lengths, k_lengths or lengths):
        if length:
            rows, keys = slice(q_start, q_start + length), slice(k_start, k_start + k_length)
            _, allowed = case(name, length, k_length, block, Hq)
            o, l = reference_attention(*(t.cpu().double().transpose(0, 1)[None]
                                         for t in (q[rows], k[keys], v[keys])), allowed)
            out[rows] = o[0].transpose(0, 1)
            lse[:, rows] = l[0]
        q_start += length
        k_start += k_length
    return out, lse


def check(out, lse, ref_out, ref_lse, tolerance, lse_tolerance):
    out, lse = out.cpu().double(), lse.cpu().double()
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    error = (out - ref_out).norm() / ref_out.norm()
    assert error.item() < tolerance, f"relative error {error.item():.2e}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert (lse[finite] - ref_lse[finite]).abs().max().item() < lse_tolerance


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64-reference", "f32-cpu"])
@pytest.mark.parametrize("name", STABLE)
def test_each_sequence_as_if_alone(name, dtype, rng):
    Hq, Hkv, D, block = 4, 2, 16, (16, 32)
    q, k, v, cu = packed(rng, LENGTHS, Hq, Hkv, D, dtype)
    max_len = max(LENGTHS)
    mask, _ = case(name, max_len, max_len, block, Hq)
    out, lse = spattn.attention_varlen(q, k, v, cu, cu, max_len, max_len, mask, return_lse=True)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (Hq, q.shape[0])
    ref_out, ref_lse = expected(name, q, k, v, LENGTHS, block)
    # lse is float32 for every input dtype.
    check(out, lse, ref_out, ref_lse, 1e-10 if dtype == torch.float64 else 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64-reference", "f32-cpu"])
@pytest.mark.parametrize("name", STABLE)
def test_query_chunks_after_cached_keys(name, dtype, rng):
    Hq, Hkv, D, block = 4, 2, 16, (16, 32)
    q_lengths, k_lengths = [17, 1, 0, 30, 32, 0, 1], [40, 1, 9, 90, 32, 0, 61]  # the last: one query (decoding)
    q, k, v, cu_q, cu_k = packed_chunks(rng, q_lengths, k_lengths, Hq, Hkv, D, dtype)
    mask, _ = case(name, 90, 90, block, Hq)
    out, lse = spattn.attention_varlen(q, k, v, cu_q, cu_k, 32, 90, mask, return_lse=True)
    assert out.shape == q.shape and lse.shape == (Hq, q.shape[0])
    ref_out, ref_lse = expected(name, q, k, v, q_lengths, block, k_lengths)
    check(out, lse, ref_out, ref_lse, 1e-10 if dtype == torch.float64 else 1e-5, 1e-5)


def test_mask_none_is_dense_and_scale_is_passed(rng):
    q, k, v, cu = packed(rng, [5, 40, 0, 3], 2, 2, 8)
    out = spattn.attention_varlen(q, k, v, cu, cu, 40, 40, scale=0.3)
    ref = torch.cat([spattn.attention(*(t[a:b].transpose(0, 1)[None] for t in (q, k, v)), scale=0.3)[0]
                     .transpose(0, 1) for a, b in [(0, 5), (5, 45), (45, 48)]])
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_a_batch_of_empty_sequences_gives_empty_outputs():
    q = torch.randn(0, 2, 8)
    cu = torch.zeros(3, dtype=torch.int32)
    out, lse = spattn.attention_varlen(q, q[:, :1], q[:, :1], cu, cu, 0, 0, return_lse=True)
    assert out.shape == (0, 2, 8) and lse.shape == (2, 0)


def test_torch_compile_traces_the_operator(rng):
    torch._dynamo.reset()
    q, k, v, cu = packed(rng, [7, 30], 2, 1, 16, torch.float32)
    mask = patterns.causal(30, block_size=16)
    compiled = torch.compile(lambda q, k, v, cu: spattn.attention_varlen(q, k, v, cu, cu, 30, 30, mask) * 2,
                             fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v, cu), spattn.attention_varlen(q, k, v, cu, cu, 30, 30, mask) * 2)


def test_bad_arguments(rng):
    q, k, v, cu = packed(rng, [5, 9], 2, 1, 8)
    mask = patterns.causal(9, block_size=16)
    with pytest.raises(ValueError, match=r"q must be 3-D \(total, heads, head_dim\)"):
        spattn.attention_varlen(q[None], k, v, cu, cu, 9, 9, mask)
    with pytest.raises(TypeError, match="cu_seqlens_q dtype must be torch.int32, got torch.int64"):
        spattn.attention_varlen(q, k, v, cu.long(), cu, 9, 9, mask)
    with pytest.raises(ValueError, match="cu_seqlens_k must be 1-D"):
        spattn.attention_varlen(q, k, v, cu, cu[None], 9, 9, mask)
    with pytest.raises(ValueError, match="cu_seqlens_q has 3 entries but cu_seqlens_k has 2"):
        spattn.attention_varlen(q, k, v, cu, cu[:2], 9, 9, mask)
    with pytest.raises(TypeError, match="max_seqlen_q must be an int"):
        spattn.attention_varlen(q, k, v, cu, cu, 9.0, 9, mask)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[0\] must be 0, got 1"):
        spattn.attention_varlen(q, k, v, torch.tensor([1, 5, 14], dtype=torch.int32), cu, 9, 9, mask)
    with pytest.raises(ValueError, match="sequence 0 has 5 queries but 4 keys"):
        spattn.attention_varlen(q, k, v, cu, torch.tensor([0, 4, 14], dtype=torch.int32), 10, 10,
                                patterns.causal(10))
    with pytest.raises(ValueError, match="sequence 1 has length 9 .* but max_seqlen_q=8"):
        spattn.attention_varlen(q, k, v, cu, cu, 8, 8, mask)
    with pytest.raises(ValueError, match="mask must be built for one length >= max_seqlen_q"):
        spattn.attention_varlen(q, k, v, cu, cu, 9, 9, patterns.causal(8))
    with pytest.raises(ValueError, match="depends on the sequence lengths"):
        spattn.attention_varlen(q, k, v, cu, cu, 9, 9, patterns.bigbird(9, block_size=4))
    with pytest.raises(ValueError, match="backend 'cuda' needs CUDA tensors"):
        spattn.attention_varlen(q, k, v, cu, cu, 9, 9, mask, backend="cuda")


# ---- CUDA ----

@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", ["causal", "sliding_window", "streaming", "dilated", "per_head"])
def test_cuda_each_sequence_as_if_alone(name, dtype, head_dim, rng):
    lengths, Hq, Hkv, block = [300, 1, 0, 17, 129, 500], 4, 2, 64
    q, k, v, cu = packed(rng, lengths, Hq, Hkv, head_dim, dtype, "cuda")
    mask, _ = case(name, 500, 500, block, Hq)
    # Poison: NaN blocks of the outputs' sizes, freed so that the caching allocator hands them out again.
    poison = [torch.full_like(q, float("nan")), torch.full((Hq, q.shape[0]), float("nan"), device="cuda")]
    del poison
    out, lse = spattn.attention_varlen(q, k, v, cu, cu, 500, 500, mask.to("cuda"), return_lse=True)
    assert out.is_cuda and out.dtype == dtype
    ref_out, ref_lse = expected(name, q, k, v, lengths, block)
    check(out, lse, ref_out, ref_lse, 1e-2 if dtype == torch.bfloat16 else 3e-3, 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["causal", "sliding_window", "streaming", "dilated"])
def test_cuda_query_chunks_after_cached_keys(name, rng):
    q_lengths, k_lengths, Hq, Hkv, block = [100, 1, 0, 17, 129, 500], [300, 1, 5, 530, 129, 700], 4, 2, 64
    q, k, v, cu_q, cu_k = packed_chunks(rng, q_lengths, k_lengths, Hq, Hkv, 128, torch.bfloat16, "cuda")
    mask, _ = case(name, 700, 700, block, Hq)
    out, lse = spattn.attention_varlen(q, k, v, cu_q, cu_k, 500, 700, mask.to("cuda"), return_lse=True)
    ref_out, ref_lse = expected(name, q, k, v, q_lengths, block, k_lengths)
    check(out, lse, ref_out, ref_lse, 1e-2, 1e-2)


@pytest.mark.gpu
def test_cuda_graph_capture_with_new_lengths(rng):
    # cu_seqlens live on the device: a captured call follows their new values.
    q, k, v, cu = packed(rng, [200, 56], 4, 4, 64, torch.bfloat16, "cuda")
    mask = patterns.sliding_window(256, window=64, block_size=64, device="cuda")
    spattn.attention_varlen(q, k, v, cu, cu, 256, 256, mask)  # first use: the device plan is made here
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = spattn.attention_varlen(q, k, v, cu, cu, 256, 256, mask)
    cu.copy_(torch.tensor([0, 10, 256], dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, spattn.attention_varlen(q, k, v, cu, cu, 256, 256, mask), rtol=0, atol=0)


@pytest.mark.gpu
def test_cuda_errors(rng):
    q, k, v, cu = packed(rng, [30, 34], 2, 2, 64, torch.bfloat16, "cuda")
    mask = patterns.causal(64, device="cuda")
    with pytest.raises(ValueError, match="cu_seqlens_q is on cpu but q is on cuda"):
        spattn.attention_varlen(q, k, v, cu.cpu(), cu, 64, 64, mask)
    with pytest.raises(ValueError, match="needs CPU tensors"):
        spattn.attention_varlen(q, k, v, cu, cu, 64, 64, mask, backend="reference")
