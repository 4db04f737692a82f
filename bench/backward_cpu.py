#!/usr/bin/env python3
"""bench/backward_cpu.py - the backward pass on the CPU: spattn's fast CPU backward
against PyTorch's CPU autograd of scaled_dot_product_attention, same inputs, same run.

For each mask, fp32, (B, H, L, D) tensors: the forward runs once, then the backward
(torch.autograd.grad of out against a fixed d_out, the graph retained) is timed,
median of --repeats after a warm-up. SDPA runs with the equivalent boolean mask for
causal (is_causal) and dense only (a window needs an L x L mask; its SDPA time would
be the dense one). Effective GFLOP/s = 2.5 x 4 x kept pairs x D / time (the
FlashAttention convention: the backward does 2.5x the forward's products).
"vs density x dense" divides a mask's time by (its density x spattn's dense time).

    python3 bench/backward_cpu.py [--seq 4096] [--heads 4] [--head-dim 128]
        [--masks dense,causal,window,streaming] [--repeats 5] [--out ...]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import spattn
from cpu_results import cpu_name, results_path
from spattn import patterns


def backward_seconds(out, inputs, d_out, repeats):
    torch.autograd.grad(out, inputs, d_out, retain_graph=True)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        torch.autograd.grad(out, inputs, d_out, retain_graph=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times), max(times)




def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--masks", default="dense,causal,window,streaming")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    L, H, D = args.seq, args.heads, args.head_dim
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, H, L, D, requires_grad=True) for _ in range(3))
    d_out = torch.randn(1, H, L, D)
    masks = {"dense": (None, dict()), "causal": (patterns.causal(L), dict(is_causal=True)),
             "window": (patterns.sliding_window(L, window=512), None),
             "streaming": (patterns.streaming(L, sink=64, window=512), None)}
    rows = []
    print(f"# backward, {cpu_name()}, {torch.get_num_threads()} threads, fp32, B=1, H={H}, L={L}, D={D}")
    print("| mask | density | spattn ms (min-max) | GFLOP/s | SDPA autograd ms | spattn / SDPA | vs density x dense |")
    print("|---|---|---|---|---|---|---|")
    dense_ms = None
    for name in args.masks.split(","):
        mask, sdpa_args = masks[name]
        density = 1.0 if mask is None else mask.density
        out = spattn.attention(q, k, v, mask)
        median, low, high = backward_seconds(out, (q, k, v), d_out, args.repeats)
        sdpa_ms = None
        if sdpa_args is not None:
            ref = F.scaled_dot_product_attention(q, k, v, **sdpa_args)
            sdpa_ms = backward_seconds(ref, (q, k, v), d_out, args.repeats)[0] * 1e3
        ms = median * 1e3
        dense_ms = ms if name == "dense" else dense_ms
        gflops = 2.5 * 4 * density * H * L * L * D / median / 1e9
        scaling = ms / (density * dense_ms) if dense_ms else float("nan")
        rows.append({"mask": name, "density": density, "ms": ms, "min_ms": low * 1e3, "max_ms": high * 1e3,
                     "gflops": gflops, "sdpa_ms": sdpa_ms, "vs_density_dense": scaling})
        sdpa_cell = f"{sdpa_ms:.1f}" if sdpa_ms else "-"
        ratio = f"{ms / sdpa_ms:.2f}" if sdpa_ms else "-"
        print(f"| {name} | {density:.3f} | {ms:.1f} ({low * 1e3:.1f}-{high * 1e3:.1f}) | {gflops:.1f} | {sdpa_cell} | "
              f"{ratio} | {scaling:.2f} |")
    out_path = args.out or results_path("backward_cpu.json")
    with open(out_path, "w") as f:
        json.dump({"cpu": cpu_name(), "threads": torch.get_num_threads(), "args": vars(args), "rows": rows}, f,
                  indent=1)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
