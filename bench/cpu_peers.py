#!/usr/bin/env python3
"""bench/cpu_peers.py - spattn's CPU backend next to PyTorch's CPU SDPA, same machine, same run.

For every pattern and sequence length (B=1, fp32, default H=4, D=128, L=4096,8192)
it times, one right after the other:
  * spattn's fused CPU backend, through `spattn run --json --backend cpu`
    (median of --repeats after one warm-up, the CLI's own timer);
  * torch.nn.functional.scaled_dot_product_attention on the CPU with the same
    shapes and threads: plain for dense, is_causal=True for causal, and with the
    boolean (L, L) mask expanded from the pattern for the sparse ones (PyTorch
    computes every pair whatever the mask holds, so its time does not depend on
    the mask's content; bigbird's and random's blocks are drawn here with numpy,
    with the same structure and density as spattn's but not the same draws).
Effective GFLOP/s count only the pairs the mask keeps: 4 * kept_pairs * D / time,
for both sides. The machine's fp32 FMA peak is measured by the CLI in the same
run (`spattn bench --preset cpu`). Results go to
bench/results/<cpu model>_<N>cpu/cpu_peers.json (the run's date inside),
and a markdown table is printed.

    python3 bench/cpu_peers.py --spattn build/tools/spattn [--seqs 4096,8192] [--heads 4]
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

BLOCK = 128
WINDOW = 1024
SINK = 128

# Flags exactly as in spattn's `bench --preset cpu` catalogue (tools/spattn/bench_cpu.cpp).
PATTERNS = {
    "dense": ["--pattern", "dense"],
    "causal": ["--pattern", "causal"],
    "sliding-window": ["--pattern", "sliding-window", "--window", str(WINDOW)],
    "streaming": ["--pattern", "streaming", "--sink", str(SINK), "--window", str(WINDOW)],
    "bigbird": ["--pattern", "bigbird"],
    "random": ["--pattern", "random", "--density", "0.1", "--seed", "0"],
}


def run_cli(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cpu_peers: {' '.join(cmd)} failed:\n{done.stderr}")
    return done.stdout


def machine(spattn):
    """CPU description and fp32 FMA peak, measured by the CLI now."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "peak.json")
        run_cli([spattn, "bench", "--preset", "cpu", "--patterns", "dense", "--seqs", "512", "--heads", "1",
                 "--long-seq", "0", "--repeats", "1", "--naive-up-to", "0", "--out", path])
        with open(path) as f:
            doc = json.load(f)
    cpu = dict(doc["cpu"])
    cpu["fma_peak_gflops"] = doc["fma_peak_gflops"]
    return cpu


def ours(spattn, pattern, seq, heads, head_dim, repeats):
    cmd = [spattn, "run", "--json", "--backend", "cpu", "--seq", str(seq), "--heads", str(heads),
           "--head-dim", str(head_dim), "--repeats", str(repeats)] + PATTERNS[pattern]
    return json.loads(run_cli(cmd))


def block_mask_to_tokens(blocks, seq):
    return np.kron(blocks, np.ones((BLOCK, BLOCK), dtype=bool))[:seq, :seq]


def bigbird_blocks(n, rng):
    """Window of 3 blocks, 1 global block at each end, 3 random blocks per row (spattn's defaults)."""
    b = np.arange(n)
    blocks = np.abs(b[:, None] - b[None, :]) <= 1
    blocks[:1, :] = blocks[-1:, :] = blocks[:, :1] = blocks[:, -1:] = True
    for row in range(1, n - 1):
        free = np.flatnonzero(~blocks[row])
        blocks[row, rng.choice(free, size=min(3, free.size), replace=False)] = True
    return blocks


def token_mask(pattern, seq, rng):
    """The (seq, seq) boolean mask of a sparse pattern (True = attend)."""
    i = np.arange(seq)[:, None]
    j = np.arange(seq)[None, :]
    if pattern == "sliding-window":
        return (j <= i) & (i - j < WINDOW)
    if pattern == "streaming":
        return (j <= i) & ((j < SINK) | (i - j < WINDOW))
    n = (seq + BLOCK - 1) // BLOCK
    if pattern == "bigbird":
        return block_mask_to_tokens(bigbird_blocks(n, rng), seq)
    if pattern == "random":
        blocks = (rng.random((n, n)) < 0.1) | np.eye(n, dtype=bool)
        return block_mask_to_tokens(blocks, seq)
    raise ValueError(pattern)


def median_time(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_sdpa(pattern, seq, heads, head_dim, repeats, rng):
    """(variant, seconds) of PyTorch CPU SDPA on N(0, 1) inputs of the shape."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, seq, head_dim, generator=gen) for _ in range(3))
    if pattern == "dense":
        return "sdpa", median_time(lambda: F.scaled_dot_product_attention(q, k, v), repeats)
    if pattern == "causal":
        return "sdpa is_causal", median_time(
            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), repeats)
    mask = torch.from_numpy(token_mask(pattern, seq, rng))
    return "sdpa bool mask", median_time(
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), repeats)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spattn", default="build/tools/spattn", help="the spattn CLI binary")
    parser.add_argument("--seqs", default="4096,8192")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="PyTorch threads (default: all)")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/<cpu model>_<N>cpu/cpu_peers.json)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    cpu = machine(args.spattn)
    peak = cpu["fma_peak_gflops"]
    print(f"CPU {cpu['model']}, spattn kernel {cpu['kernel']}, {cpu['threads']} threads, "
          f"fp32 FMA peak {peak:.0f} GFLOP/s; PyTorch {torch.__version__} with {torch.get_num_threads()} threads")

    results = []
    for seq in (int(s) for s in args.seqs.split(",")):
        for pattern in args.patterns.split(","):
            mine = ours(args.spattn, pattern, seq, args.heads, args.head_dim, args.repeats)
            variant, torch_s = torch_sdpa(pattern, seq, args.heads, args.head_dim, args.repeats, rng)
            kept = mine["kept_pairs"]
            spattn_s = mine["time_ms"] / 1e3
            results.append({
                "pattern": pattern, "flags": " ".join(PATTERNS[pattern]), "seq": seq, "heads": args.heads,
                "head_dim": args.head_dim, "dtype": "fp32", "density": mine["density"], "kept_pairs": kept,
                "spattn_ms": spattn_s * 1e3, "spattn_gflops": mine["gflops"],
                "spattn_fraction_of_peak": mine["gflops"] / peak,
                "torch_variant": variant, "torch_ms": torch_s * 1e3,
                "torch_gflops_effective": 4.0 * kept * args.head_dim / torch_s / 1e9,
                "speedup_vs_torch": torch_s / spattn_s,
            })

    print("\n| pattern | L | density | spattn ms | GFLOP/s | of peak | PyTorch | PyTorch ms | speedup |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['pattern']} | {r['seq']} | {r['density']:.3f} | {r['spattn_ms']:.1f} | "
              f"{r['spattn_gflops']:.0f} | {r['spattn_fraction_of_peak']:.2f} | {r['torch_variant']} | "
              f"{r['torch_ms']:.1f} | {r['speedup_vs_torch']:.2f}x |")

    date = datetime.date.today().isoformat()
    card = re.sub(r"[^a-z0-9]+", "_", re.sub(r"\(r\)", "", cpu["model"].lower())).strip("_") + f"_{cpu['logical_cpus']}cpu"
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", card, "cpu_peers.json")
    doc = {"tool": "bench/cpu_peers.py", "date": date, "machine": cpu,
           "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "batch": 1, "repeats": args.repeats, "results": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
