"""Gradients of spattn.attention on CPU and CUDA tensors, and clear errors where there is no backward pass yet.

float64 gradients (the exact reference backward) pass torch.autograd.gradcheck
against finite differences; the LSE's gradient equals that of float64 logsumexp; float32 and bfloat16
gradients of the fast CPU backward equal those of float64 SDPA with the
equivalent boolean mask, for several patterns, GQA, Lq != Lk and (B, L, H, D)
views; a Hugging Face model trains through attn_implementation="spattn" with
the gradients of "sdpa"; on CUDA tensors (bf16, fp16) the gradients equal
float64 SDPA's, also through torch.compile and after out.sum() (expanded
gradients). The varlen operator's gradients pass gradcheck in float64 and
equal each sequence's own in float32 on the CPU; on CUDA tensors it raises
GradientNotImplementedError when a gradient reaches it.
"""
import copy

import pytest
import torch

import spattn
from spattn import patterns
from spattn._autograd import GradientNotImplementedError

import spec
from spec import randn


def sdpa_grads(q, k, v, allowed, d_out):
    """Gradients of float64 SDPA with the boolean mask `allowed` (H or 1, Lq, Lk), GQA by repetition."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        q64, k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1), attn_mask=allowed)
    out.backward(d_out.double())
    return q64.grad, k64.grad, v64.grad


def spattn_grads(q, k, v, mask, d_out, **kwargs):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = spattn.attention(q, k, v, mask, **kwargs)
    out.backward(d_out)
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("mask_name", ["none", "causal", "window", "bigbird"])
def test_float64_gradients_pass_gradcheck(mask_name, rng):
    Lq, Lk = 11, 13
    masks = {"none": None,
             "causal": patterns.causal(Lq, Lk, block_size=4),
             "window": patterns.sliding_window(Lq, Lk, window_left=3, window_right=2, block_size=(4, 5)),
             "bigbird": patterns.bigbird(Lq, Lk, window_blocks=1, random_blocks=1, block_size=4)}
    q = randn(rng, 1, 2, Lq, 5).requires_grad_()
    k, v = (randn(rng, 1, 1, Lk, 5).requires_grad_() for _ in range(2))
    mask = masks[mask_name]
    # The output only: the LSE is float32 for every dtype, too coarse for finite
    # differences (its gradient is checked in test_lse_gradient_flows).
    assert torch.autograd.gradcheck(lambda q, k, v: spattn.attention(q, k, v, mask, scale=0.7), (q, k, v),
                                    eps=1e-6, atol=1e-6, rtol=1e-5)


PATTERNS = {
    "none": (lambda L: None, lambda L: spec.dense(L, L)),
    "causal": (lambda L: patterns.causal(L, block_size=16), lambda L: spec.dense(L, L, causal=True)),
    "streaming": (lambda L: patterns.streaming(L, sink=3, window=17, block_size=16),
                  lambda L: spec.streaming(L, L, 3, 17)),
    "strided": (lambda L: patterns.strided(L, stride=9, block_size=(16, 32)), lambda L: spec.strided(L, L, 9)),
}


@pytest.mark.parametrize("name", PATTERNS)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_cpu_gradients_equal_float64_sdpa(name, dtype, tol, rng):
    L = 70
    build, allowed = PATTERNS[name]
    q = randn(rng, 2, 4, L, 32, dtype=dtype)
    k, v = (randn(rng, 2, 2, L, 32, dtype=dtype) for _ in range(2))
    d_out = randn(rng, 2, 4, L, 32, dtype=dtype)
    got = spattn_grads(q, k, v, build(L), d_out)
    want = sdpa_grads(q, k, v, allowed(L), d_out)
    for name_, g, w in zip(("dq", "dk", "dv"), got, want):
        assert g.dtype == dtype and g.shape == w.shape, name_
        err = (g.double() - w).norm() / w.norm()
        assert err < tol, f"{name_}: relative error {err:.2e}"


def test_gradients_of_views_gqa_and_unequal_lengths(rng):
    B, Lq, Lk, H, D = 2, 30, 50, 4, 16
    x = randn(rng, B, Lq, H, D, dtype=torch.float32)
    kv = randn(rng, B, Lk, 2, 2, D, dtype=torch.float32)
    q = x.transpose(1, 2)  # (B, H, L, D) views, not contiguous
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    d_out = randn(rng, B, H, Lq, D, dtype=torch.float32)
    mask = patterns.sliding_window(Lq, Lk, window_left=12, window_right=3, block_size=8)
    got = spattn_grads(q, k, v, mask, d_out)
    want = sdpa_grads(q, k, v, spec.sliding_window(Lq, Lk, 12, 3), d_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)


def test_lse_gradient_flows(rng):
    q, k, v = (randn(rng, 1, 2, 20, 8, dtype=torch.float32).requires_grad_() for _ in range(3))
    _, lse = spattn.attention(q, k, v, patterns.causal(20, block_size=8), return_lse=True)
    lse.sum().backward()
    q64, k64 = q.detach().double().requires_grad_(), k.detach().double().requires_grad_()
    s = (q64 @ k64.transpose(-1, -2)) / 8 ** 0.5
    s = s.masked_fill(~spec.dense(20, 20, causal=True), float("-inf"))
    torch.logsumexp(s, -1).sum().backward()
    torch.testing.assert_close(q.grad.double(), q64.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(k.grad.double(), k64.grad, rtol=1e-4, atol=1e-5)
    assert torch.all(v.grad == 0)


def test_rows_without_keys_get_zero_gradients(rng):
    q = randn(rng, 1, 2, 40, 8, dtype=torch.float32).requires_grad_()
    k, v = (randn(rng, 1, 2, 10, 8, dtype=torch.float32).requires_grad_() for _ in range(2))
    out = spattn.attention(q, k, v, patterns.causal(40, 10, block_size=8))
    out.sum().backward()
    assert torch.all(q.grad[:, :, :30] == 0) and torch.isfinite(q.grad).all()
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


# A packed batch: a sequence with fewer queries than keys (its queries are its
# last positions), one with keys but no query (its dk and dv are 0), a full one.
VARLEN_Q, VARLEN_K = [3, 0, 7], [5, 4, 7]


def varlen_batch(rng, dtype, Hq=2, Hkv=1, D=5):
    cu_q = torch.tensor([0] + list(torch.tensor(VARLEN_Q).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor(VARLEN_K).cumsum(0)), dtype=torch.int32)
    q = randn(rng, sum(VARLEN_Q), Hq, D, dtype=dtype)
    k, v = (randn(rng, sum(VARLEN_K), Hkv, D, dtype=dtype) for _ in range(2))
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("mask_name", ["none", "causal", "streaming"])
def test_varlen_float64_gradients_pass_gradcheck(mask_name, rng):
    q, k, v, cu_q, cu_k = varlen_batch(rng, torch.float64)
    L = max(VARLEN_K)
    mask = {"none": None, "causal": patterns.causal(L, block_size=4),
            "streaming": patterns.streaming(L, sink=1, window=2, block_size=4)}[mask_name]

    def run(q, k, v):
        return spattn.attention_varlen(q, k, v, cu_q, cu_k, max(VARLEN_Q), L, mask, scale=0.7)

    inputs = tuple(t.requires_grad_() for t in (q, k, v))
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_varlen_gradients_equal_each_sequence_alone(rng):
    """float32 on the fast CPU backward, output and LSE both reaching the loss, against
    spattn.attention's gradients of each sequence on its own."""
    q, k, v, cu_q, cu_k = varlen_batch(rng, torch.float32, Hq=4, Hkv=2, D=16)
    L = max(VARLEN_K)
    d_out, d_lse = randn(rng, *q.shape, dtype=torch.float32), randn(rng, 4, q.shape[0], dtype=torch.float32)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = spattn.attention_varlen(*leaves, cu_q, cu_k, max(VARLEN_Q), L, patterns.causal(L, block_size=4),
                                       return_lse=True)
    ((out * d_out).sum() + (lse * d_lse).sum()).backward()
    for b, (lq, lk) in enumerate(zip(VARLEN_Q, VARLEN_K)):
        rows_q, rows_k = slice(cu_q[b].item(), cu_q[b + 1].item()), slice(cu_k[b].item(), cu_k[b + 1].item())
        if lq == 0:
            assert torch.all(leaves[1].grad[rows_k] == 0) and torch.all(leaves[2].grad[rows_k] == 0)
            continue
        alone = [t[rows].transpose(0, 1).unsqueeze(0).clone().requires_grad_()
                 for t, rows in ((q, rows_q), (k, rows_k), (v, rows_k))]
        o, l = spattn.attention(*alone, patterns.causal(lq, lk, block_size=4), return_lse=True)
        ((o * d_out[rows_q].transpose(0, 1).unsqueeze(0)).sum() + (l * d_lse[:, rows_q].unsqueeze(0)).sum()).backward()
        for leaf, want, rows in zip(leaves, alone, (rows_q, rows_k, rows_k)):
            torch.testing.assert_close(leaf.grad[rows], want.grad[0].transpose(0, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_cuda_varlen_gradients_raise_a_clear_error(rng):
    q = randn(rng, 10, 2, 64, dtype=torch.bfloat16, device="cuda").requires_grad_()
    cu = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    out = spattn.attention_varlen(q, q, q, cu, cu, 6, 6)  # the forward runs
    with pytest.raises(GradientNotImplementedError, match="attention_varlen on CUDA tensors"):
        out.sum().backward()


def test_hugging_face_training_step_matches_sdpa():
    transformers = pytest.importorskip("transformers")
    from spattn.integrations import hf  # noqa: F401 (registers attn_implementation="spattn")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=64, vocab_size=97,
                                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    reference = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    ours = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation="spattn")
    ours.load_state_dict(reference.state_dict())
    tokens = torch.randint(0, 97, (2, 40), generator=torch.Generator().manual_seed(3))
    for model in (reference, ours):
        model.train()
        model(tokens, labels=tokens).loss.backward()
    for (name, p_ref), p_ours in zip(reference.named_parameters(), ours.parameters()):
        assert p_ours.grad is not None, name
        torch.testing.assert_close(p_ours.grad, p_ref.grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("name", PATTERNS)
@pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 5e-3)], ids=["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_cuda_gradients_equal_float64_sdpa(name, dtype, tol, head_dim, rng):
    L = 200
    build, allowed = PATTERNS[name]
    q = randn(rng, 2, 4, L, head_dim, dtype=dtype, device="cuda")
    k, v = (randn(rng, 2, 2, L, head_dim, dtype=dtype, device="cuda") for _ in range(2))
    d_out = randn(rng, 2, 4, L, head_dim, dtype=dtype, device="cuda")
    mask = build(L)
    got = spattn_grads(q, k, v, None if mask is None else mask.to("cuda"), d_out)
    want = sdpa_grads(q, k, v, allowed(L).to("cuda"), d_out)
    for name_, g, w in zip(("dq", "dk", "dv"), got, want):
        error = (g.double() - w).norm() / w.norm()
        assert error.item() < tol, f"{name_}: relative error {error.item():.2e}"


@pytest.mark.gpu
def test_cuda_gradients_of_a_sum_and_under_compile(rng):
    q, k, v = (randn(rng, 1, 2, 128, 64, dtype=torch.bfloat16, device="cuda").requires_grad_() for _ in range(3))
    mask = patterns.causal(128, block_size=64, device="cuda")
    spattn.attention(q, k, v, mask).sum().backward()  # d_out is an expanded tensor of ones
    grads = [t.grad.clone() for t in (q, k, v)]
    want = sdpa_grads(q, k, v, spec.dense(128, 128, causal=True).to("cuda"), torch.ones_like(q))
    for g, w in zip(grads, want):
        assert ((g.double() - w).norm() / w.norm()).item() < 3e-2
    for t in (q, k, v):
        t.grad = None
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: spattn.attention(q, k, v, mask).sum(), fullgraph=True)
    compiled(q, k, v).backward()
    for t, g in zip((q, k, v), grads):
        torch.testing.assert_close(t.grad, g, rtol=0, atol=0)  # deterministic: the same gradients
