"""spattn.BlockMask: construction from block matrices, queries, device moves, composition."""
import torch

import spattn
from spattn import patterns

import spec


def test_from_dense_2d_and_causal():
    blocks = torch.tensor([[1, 0, 1], [0, 1, 0]], dtype=torch.bool)
    mask = spattn.BlockMask.from_dense(blocks, block_size=(4, 8), causal=True)
    assert (mask.q_len, mask.k_len, mask.num_heads) == (8, 24, 1)
    want = spec.custom(blocks.unsqueeze(0), 4, 8, 8, 24, causal=True)
    assert torch.equal(mask.to_dense(), want)
    assert mask.head_dependent is False


def test_from_dense_per_head_with_short_last_blocks():
    g = torch.Generator().manual_seed(3)
    blocks = torch.rand(3, 4, 5, generator=g) < 0.5
    mask = spattn.BlockMask.from_dense(blocks, block_size=16, seq_lengths=(60, 70))
    assert mask.num_heads == 3 and mask.head_dependent
    assert torch.equal(mask.to_dense(), spec.custom(blocks, 16, 16, 60, 70))
    # Custom blocks are kept whole: every kept block is full.
    assert mask.num_full_blocks == mask.num_blocks == int(blocks.sum())


def test_density_counts_allowed_pairs():
    mask = patterns.sliding_window(200, window=30, block_size=32)
    allowed = spec.sliding_window(200, 200, 29, 0)
    assert abs(mask.density - allowed.double().mean().item()) < 1e-12
    dilated = patterns.dilated(96, segments=[32], rates=[2], num_heads=4, block_size=16)
    assert abs(dilated.density - spec.dilated(96, 96, [32], [2], heads=4).double().mean().item()) < 1e-12


def test_to_moves_every_array_and_keeps_the_pattern():
    mask = patterns.bigbird(300, random_blocks=2, block_size=32)
    moved = mask.to("meta")
    assert moved.device.type == "meta"
    for name in ("packed", "row_offsets", "kv_indices", "kv_full"):
        assert getattr(moved, name).device.type == "meta"
    assert moved.pattern == mask.pattern
    assert (moved.num_heads, moved.num_blocks) == (mask.num_heads, mask.num_blocks)
    assert mask.to("cpu") is mask
    # A mask used on another device is moved once and kept with the mask.
    assert mask._on(torch.device("meta")) is mask._on(torch.device("meta"))


def test_arrays_are_views_of_the_one_packed_tensor():
    built = patterns.dilated(300, segments=[64, 128], rates=[2, 4], num_heads=4, block_size=(32, 16))
    mask = spattn.BlockMask(built.q_len, built.k_len, built.block_size, built.row_offsets.clone(),
                            built.kv_indices.clone(), built.kv_full.clone(), built.pattern, built.head_dependent)
    for m in (built, mask):
        assert m.row_offsets.dtype == torch.int64 and m.kv_indices.dtype == torch.int32
        assert m.kv_full.dtype == torch.uint8
        assert m.row_offsets.data_ptr() == m.packed.data_ptr() + 8 * 10  # after the header's ten words
    assert torch.equal(mask.row_offsets, built.row_offsets)
    assert torch.equal(mask.kv_indices, built.kv_indices)
    assert torch.equal(mask.kv_full, built.kv_full)
    assert torch.equal(mask.packed, built.packed)
    assert mask.num_heads == 4 and mask.density == built.density
    assert torch.equal(mask.to_dense(), built.to_dense())


def test_union_intersection_and_per_head():
    a = patterns.streaming(100, sink=2, window=9, block_size=16)
    b = patterns.strided(100, stride=7, block_size=16)
    assert torch.equal((a | b).to_dense(), spec.streaming(100, 100, 2, 9) | spec.strided(100, 100, 7))
    assert torch.equal(patterns.union(a, b, patterns.causal(100, block_size=16)).to_dense(),
                       spec.dense(100, 100, causal=True))
    c = patterns.sliding_window(100, window_left=20, window_right=20, block_size=16)
    assert torch.equal((a & c).to_dense(), spec.streaming(100, 100, 2, 9) & spec.sliding_window(100, 100, 20, 20))
    mixed = patterns.per_head([a, b], num_heads=4)
    assert mixed.num_heads == 4
    dense = mixed.to_dense()
    assert torch.equal(dense[1], spec.streaming(100, 100, 2, 9)[0])
    assert torch.equal(dense[2], spec.strided(100, 100, 7)[0])


def test_repr_and_describe():
    mask = patterns.fixed(64, stride=16, summary=4, block_size=16)
    assert "fixed(stride=16,summary=4)" in repr(mask)
    assert mask.describe() == "fixed(stride=16,summary=4)"
