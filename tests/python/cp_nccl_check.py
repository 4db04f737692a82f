"""spattn.distributed over NCCL, one GPU per rank: a script for torchrun (not a pytest module).

Every rank builds the same global bf16 inputs (one seed), takes its shard, runs
spattn.distributed.attention forward and backward with a TorchTransport on the
default group, and gathers the output, LSE and gradients back (unshard); rank 0
compares them with one spattn.attention call over the whole sequence on its GPU,
at the bf16 tolerances of test_distributed_gpu.py. Each rank's bytes sent must
equal the minimum counted independently from the dense mask. Prints PASS or
FAIL per case; exits non-zero on any failure.

    torchrun --nproc-per-node <GPUs> tests/python/cp_nccl_check.py [--backend gloo --device cpu]

(--backend gloo --device cpu runs the same check on CPU processes, float32, for a smoke test.)
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

from spattn import distributed as sd
from cp_cases import inputs, make_mask, minimum_bytes, rank_step, reference

CASES = [  # pattern, layout, L, heads, kv heads
    ("causal", "zigzag", 1024, 4, 2),
    ("causal", "contiguous", 1000, 4, 4),
    ("window", "contiguous", 1000, 4, 2),
    ("streaming", "zigzag", 1024, 4, 1),
    ("dilated", "contiguous", 1024, 4, 2),
    ("random", "zigzag", 1024, 4, 2),
    ("per-head", "contiguous", 768, 4, 2),
]


def check_case(pattern, layout_kind, L, heads, kv_heads, device, dtype):
    """This rank's failures (empty: none) for one case."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mask = make_mask(pattern, L, heads)
    q, k, v, d_out = (t.to(device, dtype) for t in inputs(L, heads, kv_heads, dtype=torch.float32, seed=L, dim=64))
    gathered, sent = rank_step(sd.TorchTransport(), q, k, v, d_out, mask.to(device), layout_kind)
    failures = []
    layout = sd.ShardLayout(layout_kind, L, world, mask.block_size[1])
    minimum = minimum_bytes(mask, layout, rank, k)
    if sent != minimum:
        failures.append(f"rank {rank} sent {sent} bytes, the minimum is {minimum}")
    if rank == 0:
        want = reference(q, k, v, d_out, mask.to(device))
        for name, got, expected in zip(("out", "lse", "dq", "dk", "dv"), gathered, want):
            finite = torch.isfinite(expected)
            if not torch.equal(finite, torch.isfinite(got)):
                failures.append(f"{name} has infinities where one call has none, or the reverse")
                continue
            err = (got.float() - expected.float())[finite].abs().max().item() if finite.any() else 0.0
            scale = expected.float()[finite].abs().max().item() if finite.any() else 0.0
            if err > 3e-2 * max(scale, 1.0):
                failures.append(f"{name} differs by {err:.3g} (scale {scale:.3g})")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cuda: the GPU of LOCAL_RANK")
    args = ap.parse_args()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("cp_nccl_check: no CUDA device; pass --backend gloo --device cpu for a CPU run")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dtype = torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
    dist.init_process_group(args.backend, device_id=device if device.type == "cuda" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    kind = str(dtype).replace("torch.", "")
    failed = 0
    for case in CASES:
        try:
            failures = check_case(*case, device, dtype)
        except Exception as error:  # this case's failure (one raised on some ranks only may stall the others)
            failures = [f"rank {rank}: {type(error).__name__}: {error}"]
        everyone = [None] * world
        dist.all_gather_object(everyone, failures)
        failures = [text for part in everyone for text in part]
        failed += bool(failures)
        if rank == 0:
            pattern, layout, L, heads, kv_heads = case
            name = f"{pattern} {layout} L={L} Hq={heads} Hkv={kv_heads} P={world} ({args.backend}, {kind})"
            print(f"{'FAIL' if failures else 'PASS'} {name}" + "".join(f"\n    {t}" for t in failures), flush=True)
    if rank == 0:
        print(f"{len(CASES) - failed} of {len(CASES)} cases passed at {world} ranks")
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
