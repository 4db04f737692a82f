#!/usr/bin/env python3
"""bench/cp_memory.py - one context-parallel rank's peak GPU memory, measured on one GPU.

A rank of spattn.distributed.attention holds its shard of q, k, v (and of the output's gradient),
the K/V rows its peers send, its partial results and, in the backward, the gradients of all of
these. This runs one rank of a P-rank group alone on the GPU: its transport (LonePeer) receives
random rows of the planned lengths from its absent peers and drops what it sends, so the memory
and the attention work are the rank's own, and only the wire is missing. For each pattern, length
and world size it runs the forward and backward of the rank that receives the most rows, and
records torch.cuda.max_memory_allocated() over the step, the shard's inputs alone, and the step's
time (attention only: no communication).

Patterns and layouts as bench/cp_scaling.py (causal zigzag; window 4096, streaming 128 + 4096,
dilated 2048/r1 + 8192/r4: contiguous), bf16, batch 1, blocks of 128.

    python3 bench/cp_memory.py [--patterns causal,window,streaming,dilated] [--lengths 262144,1048576]
        [--worlds 2,4,8] [--heads 16] [--kv-heads 16] [--head-dim 128]
        [--out bench/results/cuda-<gpu>/cp_memory.json]
"""
import argparse
import gc
import json
import os
import time

import torch

from spattn import distributed as sd
from spattn.distributed.transport import Pending, exchange_order
from cp_scaling import LAYOUTS, machine, sequence_mask


class LonePeer(sd.Transport):
    """Rank `rank` of a `world_size`-rank group whose peers are absent: what it should receive is
    random rows of the right shape, what it sends is counted and dropped."""

    def __init__(self, rank: int, world_size: int, seed: int = 0):
        super().__init__()
        self.rank, self.world_size = rank, world_size
        self.generator = None
        self.seed = seed

    def start_exchange(self, sends, recvs):
        self._count(sends)
        with torch.no_grad():
            for t in recvs.values():
                if t.numel():
                    if self.generator is None:
                        self.generator = torch.Generator(device=t.device).manual_seed(self.seed)
                    t.copy_(torch.randn(t.shape, generator=self.generator, device=t.device, dtype=t.dtype))
        return Pending(exchange_order(self.rank, self.world_size), lambda peer: None)


def busiest_rank(plan: "sd.ContextParallelPlan", world: int) -> int:
    """The rank that receives the most rows (ties: the lowest)."""
    received = [sum(plan.rows_received(r, s) for s in range(world) if s != r) for r in range(world)]
    return max(range(world), key=lambda r: (received[r], -r))


def measure(name: str, L: int, world: int, args) -> dict:
    mask = sequence_mask(name, L, args.heads)
    layout = sd.ShardLayout(LAYOUTS[name], L, world, mask.block_size[1])
    plan = sd.plan_for(mask, layout, args.heads)
    rank = busiest_rank(plan, world)
    local = layout.local_len(rank)
    received = sum(plan.rows_received(rank, s) for s in range(world) if s != rank)
    dtype, device = torch.bfloat16, torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(rank)
    q = torch.randn((1, args.heads, local, args.head_dim), generator=g, device=device, dtype=dtype)
    k, v = (torch.randn((1, args.kv_heads, local, args.head_dim), generator=g, device=device, dtype=dtype)
            for _ in range(2))
    grad = torch.randn_like(q)
    inputs_gb = sum(t.numel() * t.element_size() for t in (q, k, v, grad)) / 2**30
    for t in (q, k, v):
        t.requires_grad_(True)
    transport = LonePeer(rank, world)
    plan.rank(rank)  # the rank's masks, outside the measured step
    row = {"pattern": name, "layout": LAYOUTS[name], "L": L, "P": world, "rank": rank, "local_rows": local,
           "received_rows": received, "inputs_gb": inputs_gb}
    try:
        for step in range(2):  # the second step is measured: kernels loaded, plans cached
            for t in (q, k, v):
                t.grad = None
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            out = sd.attention(q, k, v, mask, group=transport, layout=layout)
            out.backward(grad)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            del out
        row.update(peak_gb=torch.cuda.max_memory_allocated() / 2**30, step_ms=elapsed * 1e3,
                   sent_bytes_per_step=transport.bytes_sent // 2)
    except torch.OutOfMemoryError:
        row["error"] = "oom"
    del q, k, v, grad
    gc.collect()
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patterns", default="causal,window,streaming,dilated")
    ap.add_argument("--lengths", default="262144,1048576")
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=16)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-pairs", type=float, default=3e11,
                    help="skip cases whose rank keeps more (query, key) pairs per head than this (time)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        ap.error("needs a CUDA device")
    for name in args.patterns.split(","):
        if name not in LAYOUTS or name == "random":
            ap.error(f"unknown pattern {name!r}; choose from causal, window, streaming, dilated")
    info, slug = machine(True)
    out_path = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", slug,
                                        "cp_memory.json")
    result = {"machine": info, "torch": torch.__version__, "dtype": "bfloat16", "args": vars(args), "cases": []}
    print(f"# one context-parallel rank's peak memory (forward + backward), {info['gpu']}, bf16, "
          f"Hq={args.heads}, Hkv={args.kv_heads}, D={args.head_dim}, blocks 128\n")
    print("| pattern | L | P | rank | local rows | received rows | inputs GB | peak GB | step ms (no wire) |\n"
          "|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in args.patterns.split(","):
        for L in (int(x) for x in args.lengths.split(",")):
            for world in (int(x) for x in args.worlds.split(",")):
                local = L / world
                pairs = local * (L / 2 if name == "causal" else 8192)
                if pairs > args.max_pairs:
                    row = {"pattern": name, "L": L, "P": world, "skipped": f"over --max-pairs ({pairs:.2g})"}
                    print(f"| {name} | {L} | {world} | skipped: {row['skipped']} | | | | | |", flush=True)
                else:
                    row = measure(name, L, world, args)
                    peak = f"{row['peak_gb']:.2f}" if "peak_gb" in row else row.get("error", "-")
                    ms = f"{row['step_ms']:.0f}" if "step_ms" in row else "-"
                    print(f"| {name} | {L} | {world} | {row['rank']} | {row['local_rows']} | {row['received_rows']} | "
                          f"{row['inputs_gb']:.2f} | {peak} | {ms} |", flush=True)
                result["cases"].append(row)
                os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
                with open(out_path, "w") as f:
                    json.dump(result, f, indent=1)
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    main()
