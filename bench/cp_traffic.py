#!/usr/bin/env python3
"""bench/cp_traffic.py - what context parallelism moves: spattn's plan against a plain ring and an
all-gather, simulated (plans only, no data, no GPUs).

For each pattern, sequence length L and world size P, the ContextParallelPlan of the pattern
over the layout (zigzag for causal, contiguous otherwise; blocks of --block keys) lists the key
rows each rank receives from each peer. A plain ring (and an all-gather of K/V) gives every rank
every other rank's rows: (P - 1) / P x L. Bytes are K plus V rows of --kv-heads heads of
--head-dim bf16 values. The table gives the largest and the mean per-rank receive volume and its
ratio to the ring's; the JSON keeps every rank's count.

    python3 bench/cp_traffic.py [--lengths 1048576,4194304,16777216] [--worlds 8,16,32,64]
        [--out bench/results/simulation/cp_traffic.json] [--plot docs/images/cp_traffic.png]
"""
import argparse
import json
import os
import time

import torch

import spattn
from spattn import distributed as sd
from spattn import patterns


def pattern_of(name: str, L: int, block: int):
    """The global mask's pattern (built on a short sequence: patterns are shape-free) and its layout kind."""
    short = 4 * block
    if name == "causal":
        return patterns.causal(short, block_size=block).pattern, "zigzag"
    if name == "window 4096":
        return patterns.sliding_window(short, window=4096, block_size=block).pattern, "contiguous"
    if name == "streaming 128 + 4096":
        return patterns.streaming(short, sink=128, window=4096, block_size=block).pattern, "contiguous"
    if name == "dilated 2048/r1 + 8192/r4":
        return patterns.dilated(short, segments=[2048, 8192], rates=[1, 4], causal=True, block_size=block,
                                num_heads=4).pattern, "contiguous"
    if name == "random 10% of blocks":
        g = torch.Generator().manual_seed(0)
        nb = -(-L // block)
        blocks = (torch.rand(nb, nb, generator=g) < 0.10) | torch.eye(nb, dtype=torch.bool)
        return patterns.custom(blocks, block_size=block, causal=True, seq_lengths=(L, L)).pattern, "zigzag"
    raise ValueError(name)


PATTERNS = ["causal", "window 4096", "streaming 128 + 4096", "dilated 2048/r1 + 8192/r4", "random 10% of blocks"]


def simulate(name: str, L: int, P: int, block: int):
    pattern, kind = pattern_of(name, L, block)
    layout = sd.ShardLayout(kind, L, P, block)
    plan = sd.ContextParallelPlan(pattern, layout, block, num_heads=4)
    received = [sum(plan.rows_received(r, s) for s in range(P) if s != r) for r in range(P)]
    return kind, received


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1048576,4194304,16777216")
    ap.add_argument("--worlds", default="8,16,32,64")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help="comma-separated, from the list above")
    ap.add_argument("--capped", default="random 10% of blocks",
                    help="patterns simulated only up to --capped-max-length (the random mask's block table "
                         "grows with the square of the length)")
    ap.add_argument("--capped-max-length", type=int, default=1 << 20)
    ap.add_argument("--block", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--out", default="bench/results/simulation/cp_traffic.json")
    ap.add_argument("--plot", default="")
    args = ap.parse_args()
    row_bytes = 2 * args.kv_heads * args.head_dim * 2  # K and V, bf16
    rows = []
    print("| pattern | layout | L | P | ring MB/rank | spattn max MB/rank | spattn mean MB/rank | max / ring |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.patterns.split(","):
        for L in (int(x) for x in args.lengths.split(",")):
            if name in args.capped.split(",") and L > args.capped_max_length:
                continue
            for P in (int(x) for x in args.worlds.split(",")):
                t0 = time.perf_counter()
                kind, received = simulate(name, L, P, args.block)
                ring = (L - L // P) * row_bytes  # every other rank's chunk (the smallest chunk's share)
                mx, mean = max(received) * row_bytes, sum(received) / P * row_bytes
                rows.append(dict(pattern=name, layout=kind, seq_len=L, world_size=P, block=args.block,
                                 rows_received=received, ring_bytes_per_rank=ring, bytes_max=mx, bytes_mean=mean,
                                 plan_seconds=time.perf_counter() - t0))
                print(f"| {name} | {kind} | {L} | {P} | {ring / 2**20:.0f} | {mx / 2**20:.1f} | {mean / 2**20:.1f} "
                      f"| {mx / ring:.4f} |", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(spattn=spattn.__version__, kv_heads=args.kv_heads, head_dim=args.head_dim, dtype="bf16",
                       rows=rows), f, indent=1)
    if args.plot:
        plot(rows, args.plot)


def plot(rows, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    lengths = sorted({r["seq_len"] for r in rows})
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.5 * len(lengths), 3.8), squeeze=False)
    for ax, L in zip(axes[0], lengths):
        here = [r for r in rows if r["seq_len"] == L]
        worlds = sorted({r["world_size"] for r in here})
        ring = [next(r["ring_bytes_per_rank"] for r in here if r["world_size"] == P) / 2**20 for P in worlds]
        ax.plot(worlds, ring, "k--", label="ring / all-gather")
        for name in dict.fromkeys(r["pattern"] for r in here):
            ax.plot(worlds, [next(r["bytes_max"] for r in here if r["pattern"] == name and r["world_size"] == P)
                             / 2**20 for P in worlds], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"L = {L // 2**20}M tokens")
        ax.set_xlabel("ranks")
        ax.set_ylabel("MB received per rank (largest)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
