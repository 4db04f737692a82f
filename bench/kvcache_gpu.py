#!/usr/bin/env python3
"""bench/kvcache_gpu.py - a decode step over a paged KV cache on the GPU, spattn against
PyTorch's SDPA kernels and FlexAttention's decoding kernel, same tensors, same run.

Shapes (--shapes, BxL): B sequences of L cached keys, Hq query heads over Hkv kv heads,
head dim D, bf16; one query token per sequence and one new key appended per step, the
cache in pages of --page keys handed out shuffled. Cases:
  * spattn dense, streaming (sink --sink + window --window) and sliding window
    (--window) through spattn.attention_with_kvcache on the paged cache (the patterns'
    middle pages are never read);
  * spattn quest: spattn.select_pages (top 1/8 of the pages per kv head, sink and last
    page forced) then attention on them, selection included; its selection alone too;
  * SDPA (cuDNN, flash, efficient backends, enable_gqa) over the same keys in a
    contiguous (B, Hkv, L + 1, D) cache: dense only (no sparse form);
  * FlexAttention (torch.compile(flex_attention), its decoding kernel for one query
    row) over the contiguous cache with the window and streaming masks as block masks
    of 128-key blocks, and dense.
Every case runs inside a CUDA graph of --steps steps, replayed after warm-up; the time
is the median over --repeats replays divided by the steps. spattn's eager call (no graph:
it also waits for the device to read its status) is timed apart. Bandwidth: a large
device copy (bytes read + written / time) in the same run; each row reports the bytes of
K and V the step must read and their rate. Outputs are checked: spattn dense against
SDPA, spattn's window and streaming against FlexAttention's.

    python3 bench/kvcache_gpu.py [--shapes 1x131072,8x131072,64x16384] [--heads 32]
        [--kv-heads 8] [--head-dim 128] [--page 64] [--window 4096] [--sink 128]
        [--no-flex] [--out bench/results/cuda-<card>/kvcache_gpu.json]
"""
import argparse
import json
import os
import re
import statistics

import torch
import torch.nn.functional as F

import spattn
from spattn import patterns


def graph_ms(fn, steps, repeats):
    """Median time of one call, from `repeats` replays of a CUDA graph of `steps` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(steps):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / steps)
    return statistics.median(times)


def eager_ms(fn, repeats):
    """Median wall time of one eager call (host included), after warm-up."""
    import time

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def copy_bandwidth():
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(big)
    ms = graph_ms(lambda: dst.copy_(big), 5, 9)
    return 2 * big.numel() / (ms * 1e-3)


def measure_shape(B, L, args, flex):
    Hq, Hkv, D, page = args.heads, args.kv_heads, args.head_dim, args.page
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(0)
    pages_per_seq = (L + 1 + page - 1) // page
    num_pages = B * pages_per_seq
    table = torch.randperm(num_pages, device="cuda", generator=gen).to(torch.int32).reshape(B, pages_per_seq)
    k_cache = torch.randn(num_pages, page, Hkv, D, device="cuda", dtype=dtype, generator=gen)
    v_cache = torch.randn(num_pages, page, Hkv, D, device="cuda", dtype=dtype, generator=gen)
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=dtype, generator=gen)
    k_new = torch.randn(B, 1, Hkv, D, device="cuda", dtype=dtype, generator=gen)
    v_new = torch.randn(B, 1, Hkv, D, device="cuda", dtype=dtype, generator=gen)
    lens = torch.full((B,), L, dtype=torch.int32, device="cuda")
    lo, hi = spattn.page_summaries(k_cache, [L] * B, table)
    topk = max(2, pages_per_seq // 8)
    window = patterns.sliding_window(page, window=args.window, block_size=page)
    streaming = patterns.streaming(page, sink=args.sink, window=args.window, block_size=page)

    def step(**kw):
        return lambda: spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                                     page_table=table, **kw)

    def select():
        return spattn.select_pages(q, lo, hi, lens, table, page_size=page, topk=topk)

    def quest():
        return spattn.attention_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                             page_table=table, pages=select(), page_min=lo, page_max=hi)

    # The same keys, after this step's append, contiguous for the peers: (B, Hkv, L + 1, D).
    step()()
    order = table.long()
    k_flat = k_cache[order].reshape(B, pages_per_seq * page, Hkv, D)[:, :L + 1].transpose(1, 2).contiguous()
    v_flat = v_cache[order].reshape(B, pages_per_seq * page, Hkv, D)[:, :L + 1].transpose(1, 2).contiguous()
    q_bhld = q.transpose(1, 2).contiguous()
    sink_keys = min(L + 1, args.sink)
    window_keys = min(L + 1, args.window)
    cases = [
        ("spattn dense", step(), L + 1),
        ("spattn window", step(mask=window), window_keys),
        ("spattn streaming", step(mask=streaming), min(L + 1, sink_keys + window_keys)),
        ("spattn quest (select + attend)", quest, min(L + 1, (topk + 1) * page)),
        ("spattn quest select alone", select, 0),
    ]
    backends = torch.nn.attention.SDPBackend
    for name, backend in (("cudnn", backends.CUDNN_ATTENTION), ("flash", backends.FLASH_ATTENTION),
                          ("efficient", backends.EFFICIENT_ATTENTION)):
        def sdpa(backend=backend):
            with torch.nn.attention.sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q_bhld, k_flat, v_flat, enable_gqa=True)
        cases.append((f"sdpa {name} dense (contiguous)", sdpa, L + 1))
    if flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        torch._dynamo.config.recompile_limit = 64  # one compilation per shape and mask, not a fallback to eager
        compiled = torch.compile(flex_attention, dynamic=False)
        position = L  # the query's position: the last key's

        def window_mod(b, h, q_idx, kv_idx):
            return (kv_idx <= position) & (position - kv_idx < args.window)

        def streaming_mod(b, h, q_idx, kv_idx):
            return (kv_idx <= position) & ((kv_idx < args.sink) | (position - kv_idx < args.window))

        for name, mod, keys in (("window", window_mod, window_keys),
                                ("streaming", streaming_mod, min(L + 1, sink_keys + window_keys))):
            block = create_block_mask(mod, None, None, 1, L + 1, device="cuda")
            cases.append((f"flex {name} (contiguous)",
                          lambda block=block: compiled(q_bhld, k_flat, v_flat, block_mask=block, enable_gqa=True),
                          keys))
        # Dense through an explicit all-keys block mask, made outside the graph (without one, flex
        # builds it on the host inside the call, which a CUDA graph cannot capture).
        every = create_block_mask(lambda b, h, q_idx, kv_idx: kv_idx <= position, None, None, 1, L + 1,
                                  device="cuda")
        cases.append(("flex dense (contiguous)",
                      lambda: compiled(q_bhld, k_flat, v_flat, block_mask=every, enable_gqa=True), L + 1))

    row_bytes = 2 * Hkv * D * 2
    rows, outputs = [], {}
    for name, fn, keys in cases:
        try:
            outputs[name] = fn()
            ms = graph_ms(fn, args.steps, args.repeats)
        except Exception as error:  # a peer without a kernel for this shape
            rows.append({"case": name, "error": str(error).splitlines()[0][:200]})
            continue
        rows.append({"case": name, "ms": ms, "keys_read": keys,
                     "tb_per_s": B * keys * row_bytes / (ms * 1e-3) / 1e12 if keys else None})
    rows.append({"case": "spattn dense, eager (waits for its status)", "ms": eager_ms(step(), args.repeats),
                 "keys_read": L + 1, "tb_per_s": None})

    def error_between(a, b):
        if a not in outputs or b not in outputs:
            return None
        x = outputs[a].reshape(B, -1, D).float()
        y = outputs[b].reshape(B, Hq, -1, D).transpose(1, 2).reshape(B, -1, D).float()
        return (x - y).abs().max().item()

    checks = {"spattn dense vs sdpa cudnn": error_between("spattn dense", "sdpa cudnn dense (contiguous)")}
    if flex:
        checks["spattn window vs flex"] = error_between("spattn window", "flex window (contiguous)")
        checks["spattn streaming vs flex"] = error_between("spattn streaming", "flex streaming (contiguous)")
    return {"batch": B, "keys": L, "topk_pages": topk, "rows": rows, "max_abs_differences": checks}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="1x131072,8x131072,64x16384")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--sink", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    card = torch.cuda.get_device_name()
    bandwidth = copy_bandwidth()
    shapes = []
    print(f"# decode step, {card}, bf16, Hq={args.heads}, Hkv={args.kv_heads}, D={args.head_dim}, page {args.page}, "
          f"torch {torch.__version__}; copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    for shape in args.shapes.split(","):
        B, L = (int(x) for x in shape.split("x"))
        result = measure_shape(B, L, args, not args.no_flex)
        shapes.append(result)
        print(f"\n## B={B}, L={L} (quest: top {result['topk_pages']} pages)\n")
        print("| case | ms | keys read per sequence | TB/s on them | of the copy bandwidth |")
        print("|---|---|---|---|---|")
        for r in result["rows"]:
            if "error" in r:
                print(f"| {r['case']} | not run: {r['error']} | | | |")
                continue
            rate = r["tb_per_s"]
            print(f"| {r['case']} | {r['ms']:.4f} | {r['keys_read']} | {'' if rate is None else f'{rate:.2f}'} | "
                  f"{'' if rate is None else f'{rate * 1e12 / bandwidth:.2f}'} |")
        print(f"\nmax |difference|: {result['max_abs_differences']}")
    slug = re.sub(r"[^a-z0-9]+", "-", card.lower()).strip("-")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", f"cuda-{slug}",
                                   "kvcache_gpu.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"card": card, "dtype": "bf16", "torch": torch.__version__, "args": vars(args),
                   "copy_bandwidth_tb_per_s": bandwidth / 1e12, "shapes": shapes}, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
