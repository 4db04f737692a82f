#!/usr/bin/env python3
"""bench/kvcache_cpu.py - a decode step over a paged KV cache on the CPU, against the
machine's memory bandwidth and PyTorch's SDPA on a contiguous cache, same run.

One query token per sequence (B sequences of L cached keys, Hq query heads over
Hkv kv heads, head dim D, pages of --page keys, pages handed out shuffled), with
one new key appended per step, through spattn.attention_with_kvcache with:
  * dense: every page;
  * streaming: sink 4 + window --window (the middle pages never read);
  * quest: spattn.select_pages top --topk pages per kv head, then attention
    (selection timed with it).
The peer: torch SDPA (enable_gqa) over the same keys in a contiguous (B, Hkv, L, D)
cache. Bandwidth: a large tensor copy (bytes read + written / time). Each time is
the median of --repeats runs after a warm-up; the cache lengths stay fixed (each
run writes the same new row). Fraction of bandwidth = bytes of K and V the step
must read (the pages it keeps) / time / copy bandwidth.

    python3 bench/kvcache_cpu.py [--batch 1] [--seq 32768] [--heads 32] [--kv-heads 8]
        [--head-dim 128] [--page 64] [--window 4096] [--topk 64] [--dtype float32]
        [--repeats 9] [--out bench/results/<cpu>/kvcache_cpu.json]
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


def median_seconds(run, repeats):
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times), max(times)




def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=32768)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--topk", type=int, default=64)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    dtype = getattr(torch, args.dtype)
    B, L, Hq, Hkv, D, page = args.batch, args.seq, args.heads, args.kv_heads, args.head_dim, args.page
    torch.manual_seed(0)
    pages_per_seq = (L + 1 + page - 1) // page
    num_pages = B * pages_per_seq
    table = torch.randperm(num_pages).to(torch.int32).reshape(B, pages_per_seq)
    k_cache = torch.randn(num_pages, page, Hkv, D).to(dtype)
    v_cache = torch.randn(num_pages, page, Hkv, D).to(dtype)
    q = torch.randn(B, 1, Hq, D).to(dtype)
    k_new, v_new = torch.randn(B, 1, Hkv, D).to(dtype), torch.randn(B, 1, Hkv, D).to(dtype)
    lens = torch.full((B,), L, dtype=torch.int32)
    # The same keys contiguous for SDPA: (B, Hkv, L + 1, D).
    order = table.long()
    k_flat = k_cache[order].reshape(B, pages_per_seq * page, Hkv, D)[:, :L + 1].transpose(1, 2).contiguous()
    v_flat = v_cache[order].reshape(B, pages_per_seq * page, Hkv, D)[:, :L + 1].transpose(1, 2).contiguous()
    lo, hi = spattn.page_summaries(k_cache, lens, table)

    big = torch.empty(256 * 2**20 // 4, dtype=torch.float32).uniform_()
    copy_s, _, _ = median_seconds(lambda: big.clone(), args.repeats)
    bandwidth = 2 * big.numel() * 4 / copy_s

    elem = torch.tensor([], dtype=dtype).element_size()
    row_bytes = 2 * Hkv * D * elem  # one key and one value, every kv head
    streaming = patterns.streaming(page, sink=4, window=args.window, block_size=page)
    kept_streaming = min(L + 1, 4 + args.window + page)  # about: the sink page and the window's pages

    def step(**kw):
        return lambda: spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                                     page_table=table, **kw)

    def quest():
        chosen = spattn.select_pages(q, lo, hi, lens, table, page_size=page, topk=args.topk)
        spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens, page_table=table,
                                      pages=chosen)

    cases = [("dense", step(), L + 1), ("streaming", step(mask=streaming), kept_streaming),
             ("quest", quest, min(L + 1, (args.topk + 1) * page)),
             ("sdpa contiguous", lambda: F.scaled_dot_product_attention(
                 q.transpose(1, 2), k_flat, v_flat, enable_gqa=True), L + 1)]
    rows = []
    print(f"# decode step, {cpu_name()}, {torch.get_num_threads()} threads, {args.dtype}, B={B}, L={L}, "
          f"Hq={Hq}, Hkv={Hkv}, D={D}, page {page}; copy bandwidth {bandwidth / 1e9:.1f} GB/s")
    print("| case | ms (median, min-max) | keys read | GB/s on them | of the copy bandwidth |")
    print("|---|---|---|---|---|")
    for name, run, keys in cases:
        median, low, high = median_seconds(run, args.repeats)
        rate = B * keys * row_bytes / median
        rows.append({"case": name, "ms": median * 1e3, "min_ms": low * 1e3, "max_ms": high * 1e3, "keys_read": keys,
                     "gb_per_s": rate / 1e9, "fraction_of_bandwidth": rate / bandwidth})
        print(f"| {name} | {median * 1e3:.2f} ({low * 1e3:.2f}-{high * 1e3:.2f}) | {keys} | {rate / 1e9:.1f} | "
              f"{rate / bandwidth:.2f} |")
    out = args.out or results_path("kvcache_cpu.json")
    with open(out, "w") as f:
        json.dump({"cpu": cpu_name(), "threads": torch.get_num_threads(), "args": vars(args),
                   "copy_bandwidth_gb_per_s": bandwidth / 1e9, "rows": rows}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
