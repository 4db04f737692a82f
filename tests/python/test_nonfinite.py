"""NaN and infinite inputs: every backend follows the semantics of the README ("Semantics").

Only allowed pairs are read; a NaN or +inf score of an allowed pair makes its
row NaN (output and LSE), a -inf score weighs 0 (a row of only -inf scores
gives 0 and LSE -inf), and a NaN value reaches the rows that weigh its key.
The expected result is computed here in float64 from the token mask.
"""
import math

import pytest
import torch

import spattn
from spattn import patterns

import spec
from spec import randn

NAN, INF = float("nan"), float("inf")


def expected(q, k, v, allowed, scale):
    """Dense float64 attention with the documented non-finite rules; allowed (H, Lq, Lk)."""
    q, k, v = q.double(), k.double(), v.double()
    s = torch.einsum("bhid,bhjd->bhij", q, k) * scale
    poisoned = ((torch.isnan(s) | (s == INF)) & allowed).any(-1)
    s = s.masked_fill(~allowed, -INF)
    lse = torch.logsumexp(s.nan_to_num(nan=0.0, posinf=0.0, neginf=-INF), -1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(nan=0.0)
    out = torch.einsum("bhij,bhjd->bhid", p, v)
    empty = torch.isneginf(lse)
    out = out.masked_fill(empty.unsqueeze(-1), 0.0)
    out = out.masked_fill(poisoned.unsqueeze(-1), NAN)
    return out, lse.masked_fill(poisoned, NAN)


def inject_nan_query(q, k, v):
    q[0, 0, 5, 3] = NAN


def inject_nan_key(q, k, v):
    k[0, 0, 30, 0] = NAN


def inject_inf_key(q, k, v):
    k[0, 0, 40, 1] = INF


def inject_all_minus_inf_row(q, k, v):
    k[0, 0, 0, 2] = -INF
    q[0, :, 0, 2] = 1.0


CASES = {"nan query": inject_nan_query, "nan key": inject_nan_key, "inf key": inject_inf_key,
         "row of -inf scores": inject_all_minus_inf_row}
MASKS = {"none": lambda L: (None, spec.dense(L, L)),
         "causal": lambda L: (patterns.causal(L, block_size=16), spec.dense(L, L, causal=True)),
         "window": lambda L: (patterns.sliding_window(L, window_left=20, window_right=0, block_size=16),
                              spec.sliding_window(L, L, 20, 0))}


def check(out, lse, want_out, want_lse, tol):
    assert torch.equal(torch.isnan(out), torch.isnan(want_out))
    assert torch.equal(torch.isnan(lse), torch.isnan(want_lse))
    assert torch.equal(torch.isneginf(lse), torch.isneginf(want_lse))
    finite = ~torch.isnan(want_out)
    torch.testing.assert_close(out.double()[finite], want_out[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
@pytest.mark.parametrize("mask_name", MASKS, ids=list(MASKS))
@pytest.mark.parametrize("backend,dtype,tol", [("reference", torch.float64, 1e-10), ("cpu", torch.float32, 1e-4),
                                               ("cpu", torch.bfloat16, 2e-2)])
def test_non_finite_inputs_follow_the_rules(case, mask_name, backend, dtype, tol, rng):
    L, D = 100, 32
    q, k, v = (randn(rng, 1, 2, L, D, dtype=torch.float64) for _ in range(3))
    CASES[case](q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    mask, allowed = MASKS[mask_name](L)
    out, lse = spattn.attention(q, k, v, mask, return_lse=True, backend=backend)
    want_out, want_lse = expected(q, k, v, allowed.expand(2, L, L), 1 / math.sqrt(D))
    check(out, lse, want_out, want_lse, tol)


def test_nan_value_reaches_rows_that_weigh_its_key(rng):
    L, D = 100, 32
    q, k, v = (randn(rng, 1, 2, L, D) for _ in range(3))
    v[0, 0, 50, 7] = NAN
    window = patterns.sliding_window(L, window_left=20, window_right=0, block_size=16)
    out = spattn.attention(q.float(), k.float(), v.float(), window)
    # Rows 50..70 weigh key 50 (kv head 0 serves query head 0); at keys of
    # weight 0 what a NaN value gives is not specified.
    assert torch.isnan(out[0, 0, 50:71, 7]).all()
    assert not torch.isnan(out[0, 1]).any()
    assert not torch.isnan(out[..., :7]).any() and not torch.isnan(out[..., 8:]).any()


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
@pytest.mark.parametrize("mask_name", MASKS, ids=list(MASKS))
def test_non_finite_inputs_on_cuda(case, mask_name, rng):
    L, D = 300, 64
    q, k, v = (randn(rng, 1, 2, L, D, dtype=torch.float64) for _ in range(3))
    CASES[case](q, k, v)
    q, k, v = (t.to("cuda", torch.bfloat16) for t in (q, k, v))
    mask, allowed = MASKS[mask_name](L)
    out, lse = spattn.attention(q, k, v, None if mask is None else mask.to("cuda"), return_lse=True)
    want_out, want_lse = expected(q.cpu(), k.cpu(), v.cpu(), allowed.expand(2, L, L), 1 / math.sqrt(D))
    check(out.cpu(), lse.cpu(), want_out, want_lse, 2e-2)
