#!/usr/bin/env python3
"""bench/torch_peers.py - spattn next to the PyTorch attention kernels, all
through their Python entry points, same tensors, same masks, same run.

For every sequence length it times, on the current GPU, B = 1, H heads, head
dim D, bf16, (B, H, L, D) tensors:
  * spattn.attention (the package built from this repository: `import spattn`),
  * torch SDPA with the cuDNN and with the flash (FlashAttention-2) backend,
  * FlexAttention (torch.compile(flex_attention)) with the same block mask,
on three masks:
  * causal:       every pair j <= i;
  * window:       causal sliding window of 4096 keys (SDPA: not expressible
                  without a dense L x L mask, so not timed);
  * blocks10:     a block mask keeping about 10% of the causal 128 x 128
                  blocks, with the shape dynamic selection gives (the first
                  key block, the two blocks ending at the diagonal, and random
                  earlier blocks, seeded), causal inside the diagonal blocks:
                  built once as a boolean block matrix and handed to both
                  spattn (BlockMask.from_dense) and FlexAttention (mask_mod
                  reading the same matrix). SDPA has no block-sparse mode; its
                  causal time is the reference the speedups divide.
Times are medians of CUDA-event timed calls after warm-up. Effective TFLOP/s
counts only the kept pairs: 4 * pairs * D / time. Outputs are checked against
each other (spattn vs FlexAttention on block masks, spattn vs SDPA on causal).
Results go to a JSON file (default bench/results/<card>/torch.json) and a
markdown table is printed.

    python3 bench/torch_peers.py [--seqs 8192,32768] [--heads 16] [--head-dim 128]
                                 [--masks causal,window,blocks10] [--no-flex]

--masks picks some of the masks; --no-flex leaves FlexAttention out (its
compilation takes a while), e.g. `--masks causal --no-flex` times the SDPA
causal baselines alone.
"""
import argparse
import json
import os
import re
import statistics
import sys

BLOCK = 128
WINDOW = 4096


def time_ms(fn, repeats):
    """Median of `repeats` CUDA-event timed calls after two warm-ups."""
    import torch

    fn()
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def block_matrix(seq, density, seed, device):
    """(n, n) bool: causal blocks kept like a dynamic selection at ~`density` of the causal blocks."""
    import torch

    n = (seq + BLOCK - 1) // BLOCK
    gen = torch.Generator().manual_seed(seed)
    row = torch.arange(n).unsqueeze(1)
    col = torch.arange(n).unsqueeze(0)
    causal = col <= row
    forced = (col == 0) | ((col <= row) & (col >= row - 1))
    causal_blocks = n * (n + 1) // 2
    extra = max(0.0, density * causal_blocks - forced.sum().item()) / max(1, causal_blocks - forced.sum().item())
    keep = forced | (causal & (torch.rand(n, n, generator=gen) < extra))
    return keep.to(device)


def kept_pairs(keep_blocks, seq):
    """Token pairs j <= i inside the kept blocks."""
    import torch

    rows, cols = torch.nonzero(keep_blocks.cpu(), as_tuple=True)
    total = 0
    for r, c in zip(rows.tolist(), cols.tolist()):
        i0, i1 = r * BLOCK, min(seq, (r + 1) * BLOCK)
        j0, j1 = c * BLOCK, min(seq, (c + 1) * BLOCK)
        if c < r:
            total += (i1 - i0) * (j1 - j0)
        else:  # diagonal block: pairs j <= i
            total += sum(max(0, min(j1, i + 1) - j0) for i in range(i0, i1))
    return total


def relative_error(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def measure(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    try:
        import spattn
        from spattn import patterns
        have_spattn = spattn.built_with_cuda()
        spattn_note = "" if have_spattn else "spattn was built without CUDA"
    except ImportError as e:
        have_spattn, spattn_note = False, f"import spattn failed: {e}"
    if spattn_note:
        print(f"note: {spattn_note}; spattn columns left empty", file=sys.stderr)

    torch._dynamo.config.cache_size_limit = 64
    device = "cuda"
    card = torch.cuda.get_device_name()
    flex = torch.compile(flex_attention)
    H, D = args.heads, args.head_dim
    results = []
    for seq in (int(s) for s in args.seqs.split(",")):
        gen = torch.Generator(device=device).manual_seed(seq)
        q, k, v = (torch.randn(1, H, seq, D, device=device, dtype=torch.bfloat16, generator=gen)
                   for _ in range(3))
        keep = block_matrix(seq, args.density, seed=seq, device=device)
        masks = {
            "causal": dict(mod=lambda b, h, i, j: j <= i, pairs=seq * (seq + 1) // 2),
            "window": dict(mod=lambda b, h, i, j: (j <= i) & (i - j < WINDOW),
                           pairs=sum(min(i + 1, WINDOW) for i in range(seq))),
            "blocks10": dict(mod=lambda b, h, i, j: (j <= i) & keep[i // BLOCK, j // BLOCK],
                             pairs=kept_pairs(keep, seq)),
        }
        causal_ms = {}
        for name, m in ((n, masks[n]) for n in args.masks.split(",")):
            rec = dict(seq=seq, heads=H, head_dim=D, mask=name, density=m["pairs"] / (seq * seq))
            outs = {}
            if args.flex:
                flex_mask = create_block_mask(m["mod"], None, None, seq, seq, device=device, BLOCK_SIZE=BLOCK,
                                              _compile=True)
                rec["flex_ms"] = time_ms(lambda: flex(q, k, v, block_mask=flex_mask), args.repeats)
                outs["flex"] = flex(q, k, v, block_mask=flex_mask)
            if name == "causal":
                for key, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                                     ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
                    try:
                        with sdpa_kernel(backend):
                            rec[key + "_ms"] = time_ms(
                                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.repeats)
                            outs[key] = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    except RuntimeError as e:
                        print(f"note: {key} unavailable at L={seq}: {e}", file=sys.stderr)
                causal_ms = {k_: rec[k_] for k_ in ("sdpa_cudnn_ms", "sdpa_flash_ms") if k_ in rec}
            if have_spattn:
                if name == "causal":
                    sm = patterns.causal(seq, block_size=BLOCK, device=device)
                elif name == "window":
                    sm = patterns.sliding_window(seq, window=WINDOW, block_size=BLOCK, device=device)
                else:
                    sm = spattn.BlockMask.from_dense(keep.cpu(), block_size=BLOCK, causal=True).to(device)
                rec["spattn_ms"] = time_ms(lambda: spattn.attention(q, k, v, sm), args.repeats)
                outs["spattn"] = spattn.attention(q, k, v, sm)
                if "flex" in outs:
                    rec["spattn_vs_flex_error"] = relative_error(outs["spattn"], outs["flex"])
                if "sdpa_cudnn" in outs:
                    rec["spattn_vs_sdpa_error"] = relative_error(outs["spattn"], outs["sdpa_cudnn"])
            for key in ("spattn", "sdpa_cudnn", "sdpa_flash", "flex"):
                if key + "_ms" in rec:
                    rec[key + "_tflops"] = 4.0 * m["pairs"] * H * D / (rec[key + "_ms"] * 1e-3) / 1e12
            for key, ms in causal_ms.items():
                if "spattn_ms" in rec:
                    rec["speedup_vs_" + key[:-3]] = ms / rec["spattn_ms"]
            results.append(rec)
            print(json.dumps(rec), flush=True)
    data = dict(card=card, dtype="bf16", batch=1, block=BLOCK, torch=torch.__version__,
                spattn_note=spattn_note, results=results)
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                   re.sub(r"[^a-z0-9]+", "_", card.lower()).strip("_"), "torch.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(data, f, indent=1)
    print_table(data)
    return 0


def print_table(data):
    print(f"\n{data['card']}, bf16, B=1, torch {data['torch']}; ms (effective TFLOP/s)\n")
    print("| L | H | mask | density | spattn | SDPA cuDNN | SDPA flash | FlexAttention |")
    print("|---|---|---|---|---|---|---|---|")
    for r in data["results"]:
        cells = []
        for key in ("spattn", "sdpa_cudnn", "sdpa_flash", "flex"):
            cells.append(f"{r[key + '_ms']:.3f} ({r[key + '_tflops']:.0f})" if key + "_ms" in r else "-")
        print(f"| {r['seq']} | {r['heads']} | {r['mask']} | {r['density']:.3f} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seqs", default="8192,32768")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--density", type=float, default=0.10, help="kept share of the causal blocks (blocks10)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--masks", default="causal,window,blocks10", help="comma-separated subset of the masks")
    parser.add_argument("--no-flex", dest="flex", action="store_false", help="leave FlexAttention out")
    parser.add_argument("--out", default=None, help="JSON path (default bench/results/<card>/torch.json)")
    args = parser.parse_args()
    unknown = set(args.masks.split(",")) - {"causal", "window", "blocks10"}
    if unknown:
        parser.error(f"--masks: unknown mask(s) {', '.join(sorted(unknown))}")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
