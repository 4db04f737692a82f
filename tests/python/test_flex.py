"""FlexAttention interop: BlockMask.from_flex / to_flex round trips.

For patterns both libraries express (causal, sliding window, streaming,
block-diagonal, document masks), FlexAttention's create_block_mask and
spattn's builders must give the same blocks (same kept and full blocks) and
the same pairs; spattn -> flex -> spattn keeps a mask unchanged; and
flex_attention run with the converted mask gives spattn's output.
"""
import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import spattn
from spattn import patterns

from spec import randn


def causal_mod(b, h, q, kv):
    return q >= kv


def window_mod(width):
    return lambda b, h, q, kv: (q >= kv) & (q - kv < width)


def streaming_mod(sink, window):
    return lambda b, h, q, kv: (q >= kv) & ((kv < sink) | (q - kv < window))


def diagonal_mod(block):
    return lambda b, h, q, kv: torch.div(q, block, rounding_mode="floor") == torch.div(kv, block, rounding_mode="floor")


CASES = {
    "causal": (causal_mod, lambda L, bs: patterns.causal(L, block_size=bs)),
    "sliding_window": (window_mod(50), lambda L, bs: patterns.sliding_window(L, window=50, block_size=bs)),
    "streaming": (streaming_mod(4, 40), lambda L, bs: patterns.streaming(L, sink=4, window=40, block_size=bs)),
    "block_diagonal": (diagonal_mod(48), lambda L, bs: patterns.block_diagonal(L, diagonal_block=48, block_size=bs)),
}


def same_blocks(a, b):
    return (torch.equal(a.row_offsets, b.row_offsets) and torch.equal(a.kv_indices, b.kv_indices)
            and torch.equal(a.kv_full, b.kv_full))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("length,block", [(256, 32), (200, (32, 64))], ids=["L256", "L200"])
def test_create_block_mask_converts_to_the_same_mask(name, length, block):
    mod, build = CASES[name]
    ours = build(length, block)
    block_size = block if isinstance(block, tuple) else (block, block)
    flex = create_block_mask(mod, None, None, length, length, device="cpu", BLOCK_SIZE=block_size)
    converted = spattn.BlockMask.from_flex(flex)
    assert same_blocks(converted, ours)
    assert torch.equal(converted.to_dense(), ours.to_dense())
    # With a spattn pattern for the partial blocks, flex's classification stays (it may call
    # the short last blocks partial where spattn calls them full).
    with_pattern = spattn.BlockMask.from_flex(flex, pattern=ours)
    assert torch.equal(with_pattern.kv_indices, ours.kv_indices)
    assert torch.equal(with_pattern.to_dense(), ours.to_dense())


def test_spattn_to_flex_and_back():
    mask = patterns.bigbird(300, window_blocks=3, random_blocks=2, causal=True, block_size=32)
    flex = mask.to_flex()
    assert tuple(flex.seq_lengths) == (300, 300)
    back = spattn.BlockMask.from_flex(flex)
    assert same_blocks(back, mask)
    assert torch.equal(back.to_dense(), mask.to_dense())


def test_per_head_document_mask(rng):
    L, H = 160, 2
    docs = torch.tensor([0] * 50 + [1] * 70 + [2] * 40)

    def doc_mod(b, h, q, kv):
        return (docs[q] == docs[kv]) & ((h == 0) | (q >= kv))

    flex = create_block_mask(doc_mod, None, H, L, L, device="cpu", BLOCK_SIZE=32)
    mask = spattn.BlockMask.from_flex(flex)
    assert mask.num_heads == H and mask.head_dependent
    idx = torch.arange(L)
    same_doc = docs[idx.view(-1, 1)] == docs[idx.view(1, -1)]
    want = torch.stack([same_doc, same_doc & (idx.view(-1, 1) >= idx.view(1, -1))])
    assert torch.equal(mask.to_dense(), want)
    q, k, v = (randn(rng, 1, H, L, 16, dtype=torch.float32) for _ in range(3))
    ours = spattn.attention(q, k, v, mask)
    theirs = flex_attention(q, k, v, block_mask=flex)
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_batched_flex_masks_must_agree():
    def per_batch(b, h, q, kv):
        return (q >= kv) | (b == 1)

    flex = create_block_mask(per_batch, 2, None, 64, 64, device="cpu", BLOCK_SIZE=16)
    with pytest.raises(ValueError, match="differs between batch entries"):
        spattn.BlockMask.from_flex(flex)
    with pytest.raises(TypeError, match="flex_block_mask must be a"):
        spattn.BlockMask.from_flex(object())
