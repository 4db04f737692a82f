"""spattn.distributed on one GPU: gloo processes sharing the device, CUDA tensors, the CUDA kernels.

Each process is a rank; K and V rows cross through host memory (gloo). Each
rank's bf16 output, LSE and gradients, gathered back, are compared with one
spattn.attention call over the whole sequence on the same GPU, at bf16
tolerances (the partial outputs are rounded to bf16 before the merge); the
bytes each rank sends equal the independently counted minimum.
"""
import os

import pytest
import torch
import torch.distributed as dist

import spattn
from spattn import distributed as sd
from cp_cases import inputs, make_mask, minimum_bytes, rank_step, reference, run_ranks

pytestmark = pytest.mark.gpu

CASES = [("causal", "zigzag", 1024), ("window", "contiguous", 1000), ("streaming", "zigzag", 1024),
         ("dilated", "contiguous", 1024), ("random", "zigzag", 1024), ("per-head", "contiguous", 768)]


def _worker(rank, world, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for pattern, layout, L in CASES:
            mask = make_mask(pattern, L, 4).to("cuda")
            q, k, v, d_out = (t.to("cuda", torch.bfloat16) for t in inputs(L, 4, 2, dtype=torch.float32, seed=L, dim=64))
            gathered, sent = rank_step(sd.TorchTransport(), q, k, v, d_out, mask, layout)
            want = reference(q, k, v, d_out, mask)
            for name, got, expected in zip(("out", "lse", "dq", "dk", "dv"), gathered, want):
                finite = torch.isfinite(expected)
                assert torch.equal(finite, torch.isfinite(got)), f"{pattern}: {name} has other infinities"
                err = (got.float() - expected.float())[finite].abs().max().item()
                scale = expected.float()[finite].abs().max().item()
                assert err <= 3e-2 * max(scale, 1.0), f"{pattern} {layout}: {name} differs by {err} (scale {scale})"
            layout_obj = sd.ShardLayout(layout, L, world, mask.block_size[1])
            minimum = minimum_bytes(mask.to("cpu"), layout_obj, rank, k)
            assert sent == minimum, f"{pattern}: rank {rank} sent {sent} bytes, the minimum is {minimum}"
        queue.put((rank, None))
    except Exception as error:
        queue.put((rank, f"{type(error).__name__}: {error}"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_ranks_on_one_gpu_match_one_call(world):
    failures = run_ranks(world, _worker, (), timeout=600)
    assert not failures, failures


def test_in_process_forward_on_the_gpu_matches_and_waits_for_no_host_sync():
    """Ranks as threads of this process on CUDA tensors (bf16): each rank's output and LSE equal
    one call's rows; a second step, its plans and masks made by the first, makes PyTorch wait for
    the device nowhere (torch.cuda.set_sync_debug_mode("error")). Forward only: autograd runs
    every CUDA backward of a process on one device thread, so ranks that are threads of one process
    cannot wait for each other's backward (the gloo processes above cover it)."""
    L, world = 1024, 3
    mask = make_mask("causal", L, 4).to("cuda")
    q, k, v, d_out = (t.to("cuda", torch.bfloat16) for t in inputs(L, 4, 2, dtype=torch.float32, seed=21, dim=64))
    layout = sd.ShardLayout("zigzag", L, world, mask.block_size[1])
    group = sd.InProcessGroup(world)
    shards = group.run(lambda t: [sd.shard(x, layout, t) for x in (q, k, v)])
    want_out, want_lse = (x.float() for x in spattn.attention(q, k, v, mask, return_lse=True))

    def step(t):
        q_r, k_r, v_r = shards[t.rank]
        return sd.attention(q_r, k_r, v_r, mask, group=t, layout=layout, return_lse=True)

    group.run(step)  # plans, masks on the device, kernels loaded
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        results = group.run(step)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for rank, (out, lse) in enumerate(results):
        rows = layout.positions(rank).to("cuda")
        for name, got, expected in (("out", out.float(), want_out.index_select(2, rows)),
                                    ("lse", lse, want_lse.index_select(2, rows))):
            err = (got - expected).abs().max().item()
            assert err <= 3e-2 * max(expected.abs().max().item(), 1.0), f"rank {rank}: {name} differs by {err}"
