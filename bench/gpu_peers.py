#!/usr/bin/env python3
"""bench/gpu_peers.py - spattn's CUDA kernel next to its peers, same card, same run.

For every shape and pattern it times, on the current GPU:
  * spattn's fused CUDA kernels (through build/bench/spattn_cuda_bench, CUDA events):
    the library's choice (the Hopper kernel where it runs) and the portable
    sm80 kernel forced,
  * PyTorch SDPA with the cuDNN and the flash (FlashAttention-2) backends, dense and causal,
  * FlexAttention (torch.compile(flex_attention)) with the same masks, built by
    create_block_mask with the same blocks (--block, default 128); block-level
    masks (random, bigbird) are read from the blocks spattn dumped, so both
    sides compute the same pairs.
Times are medians of triton.testing.do_bench (events); effective TFLOP/s count
only the kept pairs: 4 * kept_pairs * D / time. spattn's bench times its
calls in do_bench's regime (--warmup-ms of warm-up calls, default 25, then at
least 100 ms of timed calls). Every timing, spattn's and the peers', starts
after --rest-ms (default 500) with the card idle, so that no figure inherits
the clock a heavy case before it lowered (the card's clock follows its power
draw: dev/notes/cuda-h100-clocks-and-warm-up.md); a longer --warmup-ms, the same for
every implementation, measures the card at its power cap, as under sustained
load. Results go to bench/results/<card>/peers.json, and a markdown table is
printed. --q-len N takes the last N of the seq positions as queries (a
decoding step, or a chunk of a prefill over cached keys; the block-grid
cases random, bigbird and allblocks need Lq = Lk and are left out of the
default cases): causal is aligned bottom-right, which SDPA's flash backend
runs through torch's causal_lower_right bias; its cuDNN backend has no such
causal form (the bias would run as a materialised mask there), so that cell
stays empty, except for one query, whose bottom-right causal row is dense.
--kv-heads N shares each kv head among heads / N query heads (SDPA and
FlexAttention with enable_gqa).

    python3 bench/gpu_peers.py --bench build/bench/spattn_cuda_bench [--shapes 32768x16,131072x8]
                               [--head-dim 128] [--block 128] [--q-len N] [--kv-heads N]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

CASES = ["dense", "causal", "window", "streaming", "random", "bigbird", "dilated", "mix", "allblocks"]
SQUARE_ONLY = {"random", "random-causal", "bigbird", "allblocks"}  # block grids made for Lq = Lk
DEFAULT_BLOCK = 128
TIMED_MS = 100  # do_bench's timed span, for spattn's bench and the peers alike


def ours(bench, cases, seq, heads, head_dim, q_len, kv_heads, block, dump_dir, repeats, rest_ms, warmup_ms,
         kernel="fused"):
    """Runs spattn_cuda_bench with --kernel `kernel`; returns {case: json record}."""
    cmd = [bench, "--cases", ",".join(cases), "--seq", str(seq), "--heads", str(heads),
           "--q-len", str(q_len), "--kv-heads", str(kv_heads),
           "--head-dim", str(head_dim), "--block", str(block), "--repeats", str(repeats),
           "--dump-dir", dump_dir, "--kernel", kernel, "--rest-ms", str(rest_ms),
           "--warmup-ms", str(warmup_ms), "--timed-ms", str(TIMED_MS)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}): {run.stderr.strip()}")
    out = run.stdout
    return {r["case"]: r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{"))}


def mask_mod_for(case, seq, heads, block, dump_dir, device, q_offset=0):
    """FlexAttention mask_mod of a benchmark case (None = dense), and whether it
    reads the head; query index q stands for position q + q_offset."""
    mask_mod, per_head = position_mask_mod(case, seq, heads, block, dump_dir, device)
    if mask_mod is None or q_offset == 0:
        return mask_mod, per_head
    return (lambda b, h, q, kv: mask_mod(b, h, q + q_offset, kv)), per_head


def position_mask_mod(case, seq, heads, block, dump_dir, device):
    """mask_mod_for over positions (queries and keys both from 0)."""
    import torch

    if case in ("dense", "allblocks"):  # every block kept: FlexAttention's dense
        return None, False
    if case == "causal":
        return (lambda b, h, q, kv: kv <= q), False
    if case == "window":
        return (lambda b, h, q, kv: (kv <= q) & (q - kv < 4096)), False
    if case == "streaming":
        return (lambda b, h, q, kv: (kv <= q) & ((kv < 128) | (q - kv < 4096))), False
    if case in ("random", "bigbird"):
        n = (seq + block - 1) // block
        grid = np.fromfile(os.path.join(dump_dir, f"{case}_blocks.u8"), dtype=np.uint8).reshape(n, n)
        blocks = torch.from_numpy(grid.astype(np.bool_)).to(device)
        return (lambda b, h, q, kv: blocks[q // block, kv // block]), False
    if case == "dilated":
        def dilated(b, h, q, kv):
            branch = (q // 2048 == kv // 2048) & (q % 4 == h % 4) & (kv % 4 == h % 4) & (kv <= q)
            return branch | ((kv <= q) & (q - kv < 512))
        return dilated, True
    if case == "mix":  # the first half of the heads causal, the rest streaming 128 + 4096
        return (lambda b, h, q, kv: (kv <= q) & ((2 * h < heads) | (kv < 128) | (q - kv < 4096))), True
    raise ValueError(case)


def tflops(kept_pairs, head_dim, ms):
    return 4.0 * kept_pairs * head_dim / (ms * 1e-3) / 1e12


IMPLEMENTATIONS = [("spattn", "spattn (auto: sm90 wgmma)"), ("spattn_sm80", "spattn sm80 (mma.sync)"),
                   ("sdpa_cudnn", "SDPA cuDNN"), ("sdpa_flash", "SDPA flash (FA2)"), ("flex", "FlexAttention")]


def plot(json_paths, png_path):
    """Bar chart of effective TFLOP/s per pattern, one panel per shape, from
    one or more saved results of the same card (one call per shape, say)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = None
    for path in json_paths:
        with open(path) as f:
            part = json.load(f)
        if data is None:
            data = part
            continue
        for key in ("card", "dtype", "block"):
            if part.get(key) != data.get(key):
                raise SystemExit(f"--plot: {path} has {key} {part.get(key)!r}, {json_paths[0]} {data.get(key)!r}")
        data["results"] = data["results"] + part["results"]
    def shape_of(r):  # (Lk, heads, Lq): runs of fewer queries get panels of their own
        return r["seq"], r["heads"], r.get("q_len", r["seq"])

    shapes = sorted({shape_of(r) for r in data["results"]})
    fig, axes = plt.subplots(len(shapes), 1, figsize=(10, 3.6 * len(shapes)), squeeze=False)
    for ax, (seq, heads, q_len) in zip(axes[:, 0], shapes):
        rows = [r for r in data["results"] if shape_of(r) == (seq, heads, q_len)]
        x = np.arange(len(rows))
        width = 0.16
        for n, (key, label) in enumerate(IMPLEMENTATIONS):
            values = [r.get(key + "_tflops", 0.0) for r in rows]
            ax.bar(x + (n - (len(IMPLEMENTATIONS) - 1) / 2) * width, values, width, label=label)
        ax.set_xticks(x, [f"{r['case']}\nd={r['density']:.3f}" for r in rows])
        ax.set_ylabel("effective TFLOP/s")
        length = f"L={seq}" if q_len == seq else f"Lq={q_len}, Lk={seq}"
        ax.set_title(f"{data['card']}, {data['dtype']}, B=1, H={heads}, {length}, D={rows[0]['head_dim']}, "
                     f"block {data['block']}")
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(0, 1.05 * max(r.get(key + "_tflops", 0.0) for r in rows for key, _ in IMPLEMENTATIONS))
    fig.tight_layout()
    # One legend for every panel, right of them, clear of the bars.
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=9,
               title="same run", title_fontsize=9)
    fig.savefig(png_path, dpi=110, bbox_inches="tight")
    print(f"wrote {png_path}")


def main():
    warnings.filterwarnings("ignore", message="_compile flag")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default="build/bench/spattn_cuda_bench")
    parser.add_argument("--shapes", default="32768x16,131072x8", help="seq x heads, comma separated")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block", type=int, default=DEFAULT_BLOCK,
                        help="mask block size, both sides, for spattn and FlexAttention (a power of two, 16..256)")
    parser.add_argument("--q-len", type=int, default=None, help="queries: the last N positions (default: seq)")
    parser.add_argument("--kv-heads", type=int, default=None, help="kv heads (default: heads)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rest-ms", type=float, default=500.0,
                        help="idle time before every timing (spattn's and the peers')")
    parser.add_argument("--warmup-ms", type=float, default=25.0,
                        help="warm-up calls before every timing (spattn's and the peers')")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/<card>/peers.json)")
    parser.add_argument("--plot", default=None,
                        help="draw these saved results (comma separated, one card) instead of measuring")
    parser.add_argument("--png", default=None, help="PNG path for --plot")
    args = parser.parse_args()
    if args.rest_ms < 0:
        parser.error(f"--rest-ms must be >= 0, got {args.rest_ms}")
    if args.warmup_ms < 0:
        parser.error(f"--warmup-ms must be >= 0, got {args.warmup_ms}")
    if args.block not in (16, 32, 64, 128, 256):
        parser.error(f"--block must be a power of two from 16 to 256, got {args.block}")
    if args.plot:
        paths = args.plot.split(",")
        plot(paths, args.png or os.path.splitext(paths[0])[0] + ".png")
        return 0
    return measure(args)


def measure(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from triton.testing import do_bench

    # Every mask_mod is a new function: allow a compilation per case instead of
    # falling back to eager FlexAttention (which materialises L x L scores).
    torch._dynamo.config.cache_size_limit = 256
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 256
    device = "cuda"
    card = torch.cuda.get_device_name()
    cases = args.cases.split(",")
    if args.q_len is not None and any(args.q_len != int(s.split("x")[0]) for s in args.shapes.split(",")):
        square = SQUARE_ONLY.intersection(cases)
        if square and args.cases != ",".join(CASES):
            raise SystemExit(f"--q-len: cases {sorted(square)} need Lq = Lk")
        cases = [c for c in cases if c not in square]
    flex = torch.compile(flex_attention)

    def timed(fn):
        """do_bench's median after the card has been idle for --rest-ms."""
        torch.cuda.synchronize()
        time.sleep(args.rest_ms / 1e3)
        return do_bench(fn, warmup=args.warmup_ms, rep=TIMED_MS, return_mode="median")

    # FlexAttention on the same token mask with its blocks of --block, its
    # kernel's tiles made that small where they are larger (it rejects a
    # block mask finer than its tiles); for blocks under 128 also with its
    # default blocks of 128, where the finer mask shows up as partial blocks.
    flex_blocks = [args.block] if args.block >= 128 else [args.block, 128]

    def time_flex(row, key, block, mask_mod, per_head, q, k, v):
        """Times FlexAttention on q, k, v (B, H, L, D) with `block`-sized mask blocks into
        row[key + "_ms"] (or the reason it failed into row[key + "_error"]) and its mask
        build into row[key + "_mask_build_ms"]."""
        heads, q_len, seq, gqa = q.shape[1], q.shape[2], k.shape[2], k.shape[1] != q.shape[1]
        options = {"BLOCK_M": block, "BLOCK_N": block} if block < 128 else None
        try:
            block_mask = None
            if mask_mod is not None:
                # The second build is timed (the first compiles).
                for _ in range(2):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    block_mask = create_block_mask(mask_mod, 1, heads if per_head else None, q_len, seq,
                                                   device=device, BLOCK_SIZE=block, _compile=True)
                    torch.cuda.synchronize()
                row[key + "_mask_build_ms"] = (time.perf_counter() - t0) * 1e3
            row[key + "_ms"] = timed(lambda: flex(q, k, v, block_mask=block_mask, enable_gqa=gqa,
                                                  kernel_options=options))
        except Exception as e:  # a configuration FlexAttention rejects leaves its cell empty, with the reason
            row[key + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

    results = []
    for shape in args.shapes.split(","):
        seq, heads = (int(x) for x in shape.split("x"))
        D = args.head_dim
        q_len = seq if args.q_len is None else args.q_len
        kv_heads = heads if args.kv_heads is None else args.kv_heads
        gqa = kv_heads != heads
        with tempfile.TemporaryDirectory() as dump_dir:
            mine = ours(args.bench, cases, seq, heads, D, q_len, kv_heads, args.block, dump_dir, args.repeats,
                        args.rest_ms, args.warmup_ms)
            portable = ours(args.bench, cases, seq, heads, D, q_len, kv_heads, args.block, dump_dir, args.repeats,
                            args.rest_ms, args.warmup_ms, kernel="sm80")
            torch.manual_seed(0)
            q = torch.randn(1, heads, q_len, D, device=device, dtype=torch.bfloat16)
            k, v = (torch.randn(1, kv_heads, seq, D, device=device, dtype=torch.bfloat16) for _ in range(2))
            # Causal over the last q_len positions: SDPA's is_causal aligns top-left, this bias bottom-right.
            lower_right = causal_lower_right(q_len, seq) if q_len != seq else None
            for case in cases:
                rec = mine[case]
                kept = rec["kept_pairs"]
                row = {"case": case, "seq": seq, "q_len": q_len, "heads": heads, "kv_heads": kv_heads,
                       "head_dim": D, "dtype": "bf16",
                       "density": rec["density"], "kept_pairs": kept,
                       "spattn_kernel": rec.get("kernel", "fused"),
                       "spattn_ms": rec["time_ms"], "spattn_tflops": rec["tflops"],
                       "spattn_sm80_ms": portable[case]["time_ms"], "spattn_sm80_tflops": portable[case]["tflops"],
                       "spattn_mask_build_ms": rec["mask_build_ms"]}
                if case in ("dense", "causal"):
                    # Bottom-right causal: is_causal where Lq = Lk, nothing for one query (its row
                    # is dense), else the causal_lower_right bias, which only the flash backend runs.
                    causal = case == "causal" and q_len > 1
                    bias = lower_right if causal else None
                    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                        if bias is not None and name == "cudnn":
                            row["sdpa_cudnn_error"] = "no bottom-right causal form (causal_lower_right is materialised)"
                            continue
                        try:
                            with sdpa_kernel(backend):
                                fn = lambda: F.scaled_dot_product_attention(
                                    q, k, v, attn_mask=bias, is_causal=causal and bias is None, enable_gqa=gqa)
                                ms = timed(fn)
                            row[f"sdpa_{name}_ms"] = ms
                            row[f"sdpa_{name}_tflops"] = tflops(kept, D, ms)
                        except RuntimeError as e:
                            row[f"sdpa_{name}_error"] = str(e).splitlines()[0]
                mask_mod, per_head = mask_mod_for(case, seq, heads, args.block, dump_dir, device,
                                                  q_offset=seq - q_len)
                for flex_block in flex_blocks:
                    time_flex(row, f"flex_b{flex_block}", flex_block, mask_mod, per_head, q, k, v)
                timed_blocks = [b for b in flex_blocks if f"flex_b{b}_ms" in row]
                if timed_blocks:  # the faster of FlexAttention's block sizes
                    best = min(timed_blocks, key=lambda b: row[f"flex_b{b}_ms"])
                    row["flex_block"] = best
                    row["flex_ms"] = row[f"flex_b{best}_ms"]
                    row["flex_tflops"] = tflops(kept, D, row["flex_ms"])
                results.append(row)
                print(json.dumps(row), flush=True)
            dense_ms = next(r["spattn_ms"] for r in results if r["seq"] == seq and r["case"] == "dense") \
                if "dense" in cases else None
            if dense_ms:
                for r in results:
                    if r["seq"] == seq:
                        r["spattn_vs_density_x_dense"] = r["spattn_ms"] / (r["density"] * dense_ms)
            del q, k, v
            torch.cuda.empty_cache()

    slug = re.sub(r"[^a-z0-9]+", "_", card.lower()).strip("_")
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", slug, "peers.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"card": card, "torch": torch.__version__, "dtype": "bf16", "batch": 1, "block": args.block,
                   "timing": "median of CUDA-event timings (spattn: its own events; peers: triton do_bench)",
                   "rest_ms": args.rest_ms, "warmup_ms": args.warmup_ms,
                   "results": results}, f, indent=1)
    print(f"\n{card}, bf16, B=1, D={args.head_dim}, mask blocks {args.block}, "
          "effective TFLOP/s on kept pairs (time ms)")
    print("| L (Lq x Lk) | H (q / kv) | pattern | density | spattn (kernel) | spattn sm80 | SDPA cuDNN | SDPA flash "
          "| FlexAttention | spattn / (d x dense) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    def flex_block_note(r):  # FlexAttention's block size where it had a choice
        return f" (blocks {r['flex_block']})" if len(flex_blocks) > 1 and "flex_block" in r else ""

    for r in results:
        def cell(key):
            if key + "_ms" not in r:
                return "-"
            ms = r[key + "_ms"]
            return f"{r[key + '_tflops']:.0f} ({ms:.2f})" if ms >= 1 else f"{r[key + '_tflops']:.1f} ({ms:.4f})"
        ratio = r.get("spattn_vs_density_x_dense")
        length = r["seq"] if r["q_len"] == r["seq"] else f"{r['q_len']} x {r['seq']}"
        heads = r["heads"] if r["kv_heads"] == r["heads"] else f"{r['heads']} / {r['kv_heads']}"
        print(f"| {length} | {heads} | {r['case']} | {r['density']:.4f} | {cell('spattn')} "
              f"({r['spattn_kernel']}) | {cell('spattn_sm80')} | "
              f"{cell('sdpa_cudnn')} | {cell('sdpa_flash')} | {cell('flex')}{flex_block_note(r)} | "
              f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
