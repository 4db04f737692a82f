"""Generated cases for the property-based tests (test_fuzz.py), on the CPU or on CUDA.

The strategies draw plain descriptions (ints, names, tuples) so that
hypothesis prints and shrinks them; the functions below turn a description
into masks, tensors and the expected float64 result:

- a Target says what a device supports (dtypes, head dims, block sizes,
  layouts, backends, scales);
- a mask description is None, a leaf (one pattern of spattn.patterns with its
  parameters drawn relative to the lengths, or a random from_dense block
  matrix), a union or intersection of two leaves, or a per-head mix;
  build_mask makes the BlockMask and, independently, its token-level boolean
  mask from spec.py (patterns.md written out with torch broadcasting);
- make_tensor makes fresh N(0, 1) data in a (B, H, L, D) layout, a (B, L, H, D)
  view, or a slice of a larger buffer (on the CPU also with a head-dim stride);
- expected() is float64 SDPA with the boolean mask, rows with no allowed key
  set to 0 with LSE -inf (the documented rule where SDPA gives NaN).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import torch
from hypothesis import strategies as st

import spattn
from spattn import patterns

import spec


@dataclasses.dataclass(frozen=True)
class Target:
    device: str
    dtypes: Sequence[torch.dtype]
    head_dims: Sequence[int]
    block_sizes: Sequence[int]
    layouts: Sequence[str]
    backends: Sequence[str]
    negative_scales: bool


CPU = Target("cpu", (torch.float32, torch.float64, torch.bfloat16, torch.float16), (1, 3, 8, 16, 33, 64, 128),
             (1, 2, 3, 5, 8, 16, 17, 32, 64, 128), ("bhld", "blhd", "slice", "strided_d"),
             ("auto", "cpu", "reference"), True)
# What the CUDA kernels take: half types, these head dims, power-of-two blocks
# from 16 to 256, unit stride along D with other strides multiples of 8.
CUDA = Target("cuda", (torch.bfloat16, torch.float16), (32, 64, 96, 128, 256), (16, 32, 64, 128, 256),
              ("bhld", "blhd", "slice"), ("auto", "cuda"), False)

EDGE_LENGTHS = (0, 1, 2, 3, 7, 16, 17, 31, 64, 65, 100, 127, 129)
LEAVES = ("dense", "causal", "block_diagonal", "window", "window_sides", "streaming", "strided", "fixed",
          "dilated", "bigbird", "longformer", "custom")
STABLE_LEAVES = tuple(name for name in LEAVES if name not in ("bigbird", "custom"))

# Output and LSE tolerances (atol = rtol) by what computes the result and
# the dtype it is stored in: fp64 accumulation (the reference), fp32 (the
# fast CPU kernel), the CUDA kernels (P rounded to the input type).
ROUNDING = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
ACCUMULATION = {"reference": 1e-12, "cpu": 5e-5, "cuda": 5e-3}
LSE_TOLERANCE = {"reference": 2e-6, "cpu": 1e-4, "cuda": 1e-2}


def lengths():
    return st.one_of(st.sampled_from(EDGE_LENGTHS), st.integers(0, 140))


def block_sizes(target: Target):
    size = st.sampled_from(target.block_sizes)
    return st.one_of(size, st.tuples(size, size))


def block_pair(block):
    return (block, block) if isinstance(block, int) else block


def scales(target: Target):
    positive = st.floats(0.05, 2.0)
    options = [st.none(), positive] + ([st.floats(-2.0, -0.05)] if target.negative_scales else [])
    return st.one_of(*options)


@st.composite
def leaf_descs(draw, Lq: int, Lk: int, block, kinds: Sequence[str] = LEAVES, single_term: bool = False):
    """(kind, params) of one pattern for the lengths; params are drawn relative to them."""
    L = max(Lq, Lk, 1)
    kind = draw(st.sampled_from(kinds))
    causal = draw(st.booleans())
    if kind in ("dense", "causal"):
        return kind, dict(causal=causal)
    if kind == "block_diagonal":
        return kind, dict(diagonal_block=draw(st.integers(1, L + 2)), causal=causal)
    if kind == "window":
        return kind, dict(window=draw(st.integers(1, L + 2)), causal=causal)
    if kind == "window_sides":
        return kind, dict(window_left=draw(st.integers(0, L + 1)), window_right=draw(st.integers(0, L + 1)),
                          causal=causal)
    if kind == "streaming":
        return kind, dict(sink=draw(st.integers(0, L)), window=draw(st.integers(1, L + 1)))
    if kind == "strided":
        return kind, dict(stride=draw(st.integers(1, L + 1)))
    if kind == "fixed":
        stride = draw(st.integers(1, L + 1))
        return kind, dict(stride=stride, summary=draw(st.integers(0, stride)))
    if kind == "dilated":
        branches = 1 if single_term else draw(st.integers(1, 3))
        segments = [draw(st.integers(1, L + 2)) for _ in range(branches)]
        rates = [draw(st.integers(1, 4)) for _ in range(branches)]
        return kind, dict(segments=segments, rates=rates, causal=causal)
    if kind == "bigbird":
        blocks = -(-Lk // block_pair(block)[1])
        return kind, dict(window_blocks=draw(st.integers(1, 5)), global_blocks=draw(st.integers(0, 2)),
                          random_blocks=draw(st.integers(0, min(3, blocks))), seed=draw(st.integers(0, 2**32)),
                          causal=causal)
    if kind == "longformer":
        tokens = draw(st.lists(st.integers(0, Lk - 1), max_size=3, unique=True)) if Lk else []
        return kind, dict(window=draw(st.integers(0, L + 1)), global_tokens=tokens, causal=causal)
    return kind, dict(per_head=draw(st.booleans()), density=draw(st.floats(0.0, 1.0)),
                      seed=draw(st.integers(0, 2**31)), from_dense=draw(st.booleans()), causal=causal)


@st.composite
def mask_descs(draw, Lq: int, Lk: int, Hq: int, block):
    """None, ("leaf", leaf), ("union" | "intersection", [leaf, leaf]) or ("per_head", [leaves])."""
    shape = draw(st.sampled_from(("none", "leaf", "leaf", "leaf", "union", "intersection", "per_head")))
    if shape == "none":
        return None
    if shape == "leaf":
        return "leaf", draw(leaf_descs(Lq, Lk, block))
    if shape in ("union", "intersection"):
        single = shape == "intersection"  # an intersection cannot hold a union (multi-branch dilated)
        return shape, [draw(leaf_descs(Lq, Lk, block, single_term=single)) for _ in range(2)]
    count = draw(st.sampled_from([d for d in range(1, Hq + 1) if Hq % d == 0]))
    return "per_head", [draw(leaf_descs(Lq, Lk, block)) for _ in range(count)]


def _custom_blocks(params, Lq, Lk, Hq, block):
    block_q, block_k = block_pair(block)
    heads = Hq if params["per_head"] else 1
    generator = torch.Generator().manual_seed(params["seed"])
    return torch.rand(heads, -(-Lq // block_q), -(-Lk // block_k), generator=generator) < params["density"]


def leaf_mask(desc, Lq: int, Lk: int, Hq: int, block, device="cpu") -> spattn.BlockMask:
    kind, p = desc
    kw = dict(block_size=block, device=device)
    if kind == "dense":
        return patterns.dense(Lq, Lk, causal=p["causal"], **kw)
    if kind == "causal":
        return patterns.causal(Lq, Lk, **kw)
    if kind == "block_diagonal":
        return patterns.block_diagonal(Lq, Lk, diagonal_block=p["diagonal_block"], causal=p["causal"], **kw)
    if kind == "window":
        return patterns.sliding_window(Lq, Lk, window=p["window"], causal=p["causal"], **kw)
    if kind == "window_sides":
        return patterns.sliding_window(Lq, Lk, window_left=p["window_left"], window_right=p["window_right"],
                                       causal=p["causal"], **kw)
    if kind == "streaming":
        return patterns.streaming(Lq, Lk, sink=p["sink"], window=p["window"], **kw)
    if kind == "strided":
        return patterns.strided(Lq, Lk, stride=p["stride"], **kw)
    if kind == "fixed":
        return patterns.fixed(Lq, Lk, stride=p["stride"], summary=p["summary"], **kw)
    if kind == "dilated":
        return patterns.dilated(Lq, Lk, segments=p["segments"], rates=p["rates"], causal=p["causal"],
                                num_heads=Hq, **kw)
    if kind == "bigbird":
        return patterns.bigbird(Lq, Lk, window_blocks=p["window_blocks"], global_blocks=p["global_blocks"],
                                random_blocks=p["random_blocks"], seed=p["seed"], causal=p["causal"], **kw)
    if kind == "longformer":
        return patterns.longformer(Lq, Lk, window=p["window"], global_tokens=p["global_tokens"],
                                   causal=p["causal"], **kw)
    blocks = _custom_blocks(p, Lq, Lk, Hq, block).to(device)
    if p["from_dense"]:
        return spattn.BlockMask.from_dense(blocks, block_size=block, causal=p["causal"], seq_lengths=(Lq, Lk))
    return patterns.custom(blocks, block_size=block, causal=p["causal"], seq_lengths=(Lq, Lk))


def leaf_spec(desc, Lq: int, Lk: int, Hq: int, block, mask: Optional[spattn.BlockMask] = None) -> torch.Tensor:
    """The allowed pairs (1 or Hq, Lq, Lk) of a leaf, from spec.py (`mask`: BigBird's drawn table)."""
    kind, p = desc
    if kind in ("dense", "causal"):
        return spec.dense(Lq, Lk, causal=p["causal"] or kind == "causal")
    if kind == "block_diagonal":
        return spec.block_diagonal(Lq, Lk, p["diagonal_block"], p["causal"])
    if kind == "window":
        return spec.sliding_window(Lq, Lk, p["window"] - 1, 0, p["causal"])
    if kind == "window_sides":
        return spec.sliding_window(Lq, Lk, p["window_left"], p["window_right"], p["causal"])
    if kind == "streaming":
        return spec.streaming(Lq, Lk, p["sink"], p["window"])
    if kind == "strided":
        return spec.strided(Lq, Lk, p["stride"])
    if kind == "fixed":
        return spec.fixed(Lq, Lk, p["stride"], p["summary"])
    if kind == "dilated":
        return spec.dilated(Lq, Lk, p["segments"], p["rates"], p["causal"], heads=Hq)
    if kind == "bigbird":
        block_k = block_pair(block)[1]
        n, r = -(-Lk // block_k), p["random_blocks"]
        table = mask.pattern.table_i32.view(n, r) if r else torch.empty(n, 0, dtype=torch.int32)
        return spec.bigbird(Lq, Lk, block_k, p["window_blocks"], p["global_blocks"], table, p["causal"])
    if kind == "longformer":
        return spec.longformer(Lq, Lk, p["window"], [t for t in p["global_tokens"] if t < Lk], p["causal"])
    block_q, block_k = block_pair(block)
    return spec.custom(_custom_blocks(p, Lq, Lk, Hq, block), block_q, block_k, Lq, Lk, p["causal"])


def per_query_head(allowed: torch.Tensor, Hq: int) -> torch.Tensor:
    return allowed.expand(Hq, *allowed.shape[1:]) if allowed.shape[0] == 1 else allowed


def build_mask(desc, Lq: int, Lk: int, Hq: int, block, device="cpu"):
    """(mask or None, allowed (Hq, Lq, Lk) bool on the CPU) of a mask description."""
    if desc is None:
        return None, torch.ones(Hq, Lq, Lk, dtype=torch.bool)
    shape, leaves = desc
    leaves = [leaves] if shape == "leaf" else leaves
    masks = [leaf_mask(leaf, Lq, Lk, Hq, block, device) for leaf in leaves]
    specs = [per_query_head(leaf_spec(leaf, Lq, Lk, Hq, block, m.to("cpu")), Hq) for leaf, m in zip(leaves, masks)]
    if shape == "leaf":
        return masks[0], specs[0]
    if shape == "union":
        return patterns.union(*masks), specs[0] | specs[1]
    if shape == "intersection":
        return patterns.intersection(*masks), specs[0] & specs[1]
    group = Hq // len(masks)
    allowed = torch.stack([specs[h // group][h] for h in range(Hq)])
    return patterns.per_head(masks, num_heads=Hq), allowed


def make_tensor(generator: torch.Generator, shape, dtype, layout: str, device: str) -> torch.Tensor:
    """Fresh N(0, 1) data of logical shape (B, H, L, D) in `layout`."""
    B, H, L, D = shape

    def normal(*size):
        return torch.randn(*size, generator=generator, dtype=torch.float64).to(dtype=dtype, device=device)

    if layout == "bhld":
        return normal(B, H, L, D)
    if layout == "blhd":
        return normal(B, L, H, D).transpose(1, 2)
    if layout == "slice":  # offsets and strides stay multiples of D
        return normal(B + 1, H + 2, L + 3, D)[1:, 2:, 3:]
    return normal(B, H, L, 2 * D)[..., ::2]  # "strided_d": a stride of 2 along the head dim


def expected(q, k, v, allowed: torch.Tensor, scale):
    """float64 (out, lse) of SDPA with `allowed` (Hq, Lq, Lk); rows without keys: 0 and -inf."""
    B, Hq, Lq, D = q.shape
    Lk = k.shape[2]
    out = torch.zeros(B, Hq, Lq, D, dtype=torch.float64)
    lse = torch.full((B, Hq, Lq), float("-inf"), dtype=torch.float64)
    if out.numel() == 0 or Lk == 0:
        return out, lse
    return spec.reference_attention(q.cpu(), k.cpu(), v.cpu(), allowed, scale)


def computed_by(backend: str, dtype: torch.dtype, device: str) -> str:
    """Which accumulation computes a call: "reference", "cpu" or "cuda"."""
    if device == "cuda":
        return "cuda"
    if backend == "reference" or (backend == "auto" and dtype == torch.float64):
        return "reference"
    return "cpu"


def check_result(out, lse, ref_out, ref_lse, dtype, accumulation: str):
    """out equals ref_out within the dtype's tolerance (no NaN anywhere), lse likewise where given."""
    assert out.shape == ref_out.shape and out.dtype == dtype
    out = out.cpu().double()
    assert not torch.isnan(out).any(), "NaN in the output where SDPA has none"
    tolerance = max(ROUNDING[dtype], ACCUMULATION[accumulation])
    torch.testing.assert_close(out, ref_out, atol=tolerance, rtol=tolerance)
    if lse is None:
        return
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32
    lse = lse.cpu().double()
    assert not torch.isnan(lse).any(), "NaN in the LSE where SDPA has none"
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), "rows without keys differ"
    finite = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[finite], ref_lse[finite], atol=LSE_TOLERANCE[accumulation],
                               rtol=LSE_TOLERANCE[accumulation])


def sequence_spec(desc, Lq: int, Lk: int, Hq: int) -> torch.Tensor:
    """A prefix-stable leaf's allowed pairs (Hq, Lq, Lk) at one sequence's own lengths."""
    return per_query_head(leaf_spec(desc, Lq, Lk, Hq, None), Hq)
