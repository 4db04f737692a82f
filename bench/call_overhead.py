#!/usr/bin/env python3
"""bench/call_overhead.py - what a repeated spattn.attention call costs beyond
its kernels, next to torch SDPA in the same run, on the current GPU.

Two measurements, bf16, (B, H, L, D) tensors:

  * host overhead: a tiny call (1 x 1 x 128 x 64 by default) issued N times
    back to back and timed by the host clock up to the last call's end; the
    kernels take a few microseconds, so the time per call is the host's
    (argument checks, operator dispatch, finding the mask and its plan, the
    launches). Rows: spattn.attention with mask=None, with a dense mask
    built once, with a causal mask built once, and SDPA (its default
    backend choice, and is_causal for the causal row). Median of --rounds
    rounds, the cases interleaved in each round.
  * large calls: mask=None against the same call with an explicit dense
    mask (patterns.dense) at --seq tokens and --heads heads, CUDA-event
    median; the two must run at the same rate (both take the plan the mask
    caches), reported as effective TFLOP/s (4 * L^2 * H * D / time).

Results go to a JSON file (default bench/results/<card>/call_overhead.json)
and a table is printed.

    python3 bench/call_overhead.py [--calls 2000] [--rounds 7] [--seq 32768] [--heads 16] [--head-dim 128]
"""
import argparse
import json
import os
import re
import statistics
import time

from torch_peers import time_ms


def host_us_per_call(cases, calls, rounds):
    """{name: (median, min, max)} over rounds of the host time per call of `calls` back-to-back calls
    of each case (after a warm-up), the cases interleaved in every round so that clock ramps and
    drift fall on all of them alike."""
    import torch

    for _, fn in cases:
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    per_call = {name: [] for name, _ in cases}
    for _ in range(rounds):
        for name, fn in cases:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            per_call[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: (statistics.median(t), min(t), max(t)) for name, t in per_call.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tiny", default="1x1x128x64", help="B x H x L x D of the host-overhead calls")
    parser.add_argument("--seq", type=int, default=32768)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F

    import spattn
    from spattn import patterns

    card = torch.cuda.get_device_name()
    torch.manual_seed(0)
    B, H, L, D = (int(x) for x in args.tiny.split("x"))
    q, k, v = (torch.randn(B, H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    dense = patterns.dense(L, device="cuda")
    causal = patterns.causal(L, device="cuda")
    rows = []
    cases = [
        ("spattn, mask=None", lambda: spattn.attention(q, k, v)),
        ("spattn, dense mask", lambda: spattn.attention(q, k, v, dense)),
        ("SDPA", lambda: F.scaled_dot_product_attention(q, k, v)),
        ("spattn, causal mask", lambda: spattn.attention(q, k, v, causal)),
        ("SDPA, is_causal", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    ]
    for name, (median, low, high) in host_us_per_call(cases, args.calls, args.rounds).items():
        rows.append({"measure": "host_us_per_call", "case": name, "shape": args.tiny, "median": median,
                     "min": low, "max": high})
    sdpa = next(r["median"] for r in rows if r["case"] == "SDPA")
    print(f"# host time per call, {card}, bf16, {args.tiny}, {args.calls} calls x {args.rounds} rounds")
    print("| case | us per call (median, min-max) | / SDPA |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f}) | {r['median'] / sdpa:.2f} |")

    L, H, D = args.seq, args.heads, args.head_dim
    q, k, v = (torch.randn(1, H, L, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    big_dense = patterns.dense(L, device="cuda")
    flops = 4.0 * L * L * H * D
    large = []
    for name, fn in (("spattn, mask=None", lambda: spattn.attention(q, k, v)),
                     ("spattn, dense mask", lambda: spattn.attention(q, k, v, big_dense))):
        ms = time_ms(fn, 20)
        large.append({"measure": "large_call", "case": name, "seq": L, "heads": H, "head_dim": D, "time_ms": ms,
                      "tflops": flops / (ms * 1e-3) / 1e12})
    print(f"\n# one call at {L} tokens, {H} heads, D = {D}, bf16, dense")
    for r in large:
        print(f"| {r['case']} | {r['time_ms']:.3f} ms | {r['tflops']:.0f} TFLOP/s |")
    rows += large

    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   re.sub(r"[^a-z0-9]+", "_", card.lower()).strip("_"), "call_overhead.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"card": card, "torch": torch.__version__, "rows": rows}, f, indent=1)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
