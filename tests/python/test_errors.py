"""Bad input raises ValueError or TypeError naming the argument, never a crash."""
import time

import pytest
import torch

import spattn
from spattn import patterns

from spec import randn


@pytest.fixture
def qkv(rng):
    return randn(rng, 1, 4, 64, 16), randn(rng, 1, 2, 64, 16), randn(rng, 1, 2, 64, 16)


def test_wrong_types_and_dtypes(qkv):
    q, k, v = qkv
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        spattn.attention(q.numpy(), k, v)
    with pytest.raises(TypeError, match="q dtype must be float16, bfloat16, float32 or float64"):
        spattn.attention(q.to(torch.int64), k, v)
    with pytest.raises(TypeError, match=r"k dtype \(torch.float32\) must equal q dtype"):
        spattn.attention(q, k.float(), v)
    with pytest.raises(TypeError, match="mask must be a spattn.BlockMask"):
        spattn.attention(q, k, v, torch.ones(64, 64, dtype=torch.bool))
    with pytest.raises(TypeError, match="scale must be a real number"):
        spattn.attention(q, k, v, scale="0.1")
    with pytest.raises(ValueError, match="scale must be finite"):
        spattn.attention(q, k, v, scale=float("nan"))
    with pytest.raises(ValueError, match="backend must be one of"):
        spattn.attention(q, k, v, backend="tpu")
    with pytest.raises(TypeError, match="return_lse must be a bool"):
        spattn.attention(q, k, v, return_lse=1)


def test_shape_and_head_mismatches(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"q must be 4-D .* got shape \(4, 64, 16\)"):
        spattn.attention(q[0], k, v)
    with pytest.raises(ValueError, match=r"q heads \(4\) must be a multiple of k heads \(3\)"):
        spattn.attention(q, torch.cat([k, k[:, :1]], 1), torch.cat([v, v[:, :1]], 1))
    with pytest.raises(ValueError, match=r"v heads \(1\) must equal k heads \(2\)"):
        spattn.attention(q, k, v[:, :1])
    with pytest.raises(ValueError, match=r"v seq_len \(63\) must equal k seq_len \(64\)"):
        spattn.attention(q, k, v[:, :, :63])
    with pytest.raises(ValueError, match="head_dim differs"):
        spattn.attention(q, k, v[..., :8])
    with pytest.raises(ValueError, match="batch sizes differ"):
        spattn.attention(q, torch.cat([k, k]), torch.cat([v, v]))


def test_mixed_devices(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="k is on meta but q is on cpu"):
        spattn.attention(q, k.to("meta"), v)


def test_mask_built_for_other_lengths_or_heads(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match=r"mask was built for Lq=65, Lk=64"):
        spattn.attention(q, k, v, patterns.causal(65, 64))
    dilated = patterns.dilated(64, segments=[16], rates=[2], num_heads=2)
    with pytest.raises(ValueError, match=r"built for 2 query heads .* build it with num_heads=4"):
        spattn.attention(q, k, v, dilated)
    per_head = spattn.BlockMask.from_dense(torch.ones(3, 4, 4, dtype=torch.bool), block_size=16)
    with pytest.raises(ValueError, match="built for 3 query heads"):
        spattn.attention(q, k, v, per_head)


def test_library_errors_become_value_errors(qkv):
    q, k, v = qkv
    mask = patterns.causal(64, block_size=16)
    with pytest.raises(ValueError, match="backend 'cuda' needs CUDA tensors"):
        spattn.attention(q, k, v, mask, backend="cuda")
    spattn.attention(q, k, v, mask)
    # Arrays tampered with in place after a call: the changed mask is decoded
    # again, and the C++ validation names them.
    mask.kv_indices.copy_(mask.kv_indices.flip(0))
    with pytest.raises(ValueError, match="kv_indices of row .* must be sorted and unique"):
        spattn.attention(q, k, v, mask)


def test_pattern_parameters_are_named():
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        patterns.sliding_window(100, window=0)
    with pytest.raises(ValueError, match="either window=W or window_left/window_right, not both"):
        patterns.sliding_window(100, window=4, window_left=2)
    with pytest.raises(ValueError, match="window_left must be >= 0, got -1"):
        patterns.sliding_window(100, window_left=-1)
    with pytest.raises(TypeError, match="stride must be an int, got float"):
        patterns.strided(100, stride=2.5)
    with pytest.raises(ValueError, match=r"summary must be <= stride \(8\), got 9"):
        patterns.fixed(100, stride=8, summary=9)
    with pytest.raises(ValueError, match="segments and rates must have the same length"):
        patterns.dilated(100, segments=[8, 16], rates=[1])
    with pytest.raises(ValueError, match=r"rates\[1\] must be >= 1, got 0"):
        patterns.dilated(100, segments=[8, 16], rates=[1, 0])
    with pytest.raises(ValueError, match=r"random_blocks must be <= the number of blocks \(2\), got 3"):
        patterns.bigbird(200, random_blocks=3)
    with pytest.raises(ValueError, match=r"global_tokens must not repeat"):
        patterns.longformer(100, window=8, global_tokens=[3, 3])
    with pytest.raises(ValueError, match=r"global_tokens must be < Lk \(100\), got 100"):
        patterns.longformer(100, window=8, global_tokens=[100])
    with pytest.raises(ValueError, match="seq_len must be >= 0, got -1"):
        patterns.causal(-1)
    with pytest.raises(ValueError, match="seq_len_k must be >= 0, got -3"):
        patterns.sliding_window(10, -3, window=2)
    with pytest.raises(ValueError, match="block_size must be >= 1, got 0"):
        patterns.causal(10, block_size=0)
    with pytest.raises(ValueError, match="sink must be >= 0, got -2"):
        patterns.streaming(10, sink=-2, window=3)


def test_values_beyond_int64_and_unknown_devices_are_named():
    with pytest.raises(ValueError, match=r"seq_len must be < 2\^63, got 9223372036854775808"):
        patterns.causal(2**63)
    with pytest.raises(ValueError, match=r"segments\[0\] must be < 2\^63"):
        patterns.dilated(64, segments=[10**30], rates=[1])
    with pytest.raises(ValueError, match="device must name a device, got 'nowhere'"):
        patterns.causal(64, device="nowhere")
    with pytest.raises(TypeError, match="device must be a torch.device, a string or an int, got float"):
        patterns.causal(64, device=1.5)


def test_cuda_backend_on_host_tensors_is_refused_for_empty_calls_too():
    for q in (torch.randn(1, 2, 0, 8), torch.randn(0, 2, 5, 8)):
        with pytest.raises(ValueError, match="backend 'cuda' needs CUDA tensors"):
            spattn.attention(q, q, q, backend="cuda")
    cu = torch.zeros(2, dtype=torch.int32)
    q = torch.randn(0, 2, 8)
    with pytest.raises(ValueError, match="backend 'cuda' needs CUDA tensors"):
        spattn.attention_varlen(q, q, q, cu, cu, 0, 0, backend="cuda")


def test_combining_masks_of_other_geometry():
    with pytest.raises(ValueError, match=r"union: masks\[1\] was built for Lq=32"):
        patterns.causal(64) | patterns.causal(32)
    with pytest.raises(ValueError, match=r"masks\[1\] was built for .* block_size=\(64, 64\)"):
        patterns.intersection(patterns.causal(64), patterns.causal(64, block_size=64))
    with pytest.raises(ValueError, match=r"num_heads \(3\) must be a multiple of the number of masks \(2\)"):
        patterns.per_head([patterns.causal(64), patterns.dense(64)], num_heads=3)
    with pytest.raises(ValueError, match="cannot nest a union inside an intersection"):
        (patterns.causal(64) | patterns.sliding_window(64, window=4)) & patterns.dense(64)


def test_from_dense_checks():
    with pytest.raises(TypeError, match="block_bool must have dtype torch.bool"):
        spattn.BlockMask.from_dense(torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"block_bool must be \(nqb, nkb\) or \(H, nqb, nkb\)"):
        spattn.BlockMask.from_dense(torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"block_bool must have at least one head, got shape \(0, 2, 3\)"):
        spattn.BlockMask.from_dense(torch.ones(0, 2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"block_bool has 2 x 2 blocks but seq_lengths \(300, 100\)"):
        spattn.BlockMask.from_dense(torch.ones(2, 2, dtype=torch.bool), block_size=64, seq_lengths=(300, 100))


def _memory_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def test_mask_too_large_for_memory_is_refused_at_once():
    # 2^20 heads of a head-dependent pattern at 10^9 tokens: trillions of rows.
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"seq_len=1000000000, .*num_heads=1048576 needs \d+ bytes .*"
                                         r"of memory are available"):
        patterns.dilated(10**9, segments=[2048], rates=[4], num_heads=2**20)
    assert time.monotonic() - start < 1.0


@pytest.mark.skipif((_memory_available() or 0) > 40 << 30, reason="the mask fits in this machine's memory")
def test_streaming_at_1e11_tokens_is_refused_at_once():
    # 21.9 GB of plan, held twice while it becomes tensors: once ended in
    # std::bad_alloc after 46 s.
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"needs \d+ bytes .*of memory are available"):
        patterns.streaming(10**11, sink=4, window=256)
    assert time.monotonic() - start < 1.0
