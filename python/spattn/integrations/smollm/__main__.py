"""Command line of the SmolLM2 demo: generation, the quality sweep, results JSON and PNGs.

usage: python -m spattn.integrations.smollm [--device auto|cpu|cuda] [--cache DIR] [--out-dir DIR]
       [--sweep LENGTH:TEXT,...[:FAMILY,...]]... [--new-tokens N] [--prompt-tokens N] [--no-generate]
       [--speed-lengths N,...]

--sweep is repeatable; family names take "_" for spaces (dynamic_top-k).
Default on CUDA: 2048 and 8192 tokens of the three books, every family; on
CPU (kept modest): 2048 tokens of the three books, every family, and 8192
tokens of alice29 for dense, streaming and the dynamic families. --speed-lengths (default
8192,32768,131072 on CUDA, 2048 on CPU; "" for none) times prefill and attention alone with each
pattern next to sdpa and FlexAttention (speed.py). The output folder (default
bench/results/<cpu|cuda>-<machine>) gets demo.json, quality.png and the mask
pictures masks_*.png.
"""
from __future__ import annotations

import argparse
import json
import platform
import re
import sys
from pathlib import Path

import torch

import spattn
from spattn.integrations.smollm import assets, families, figures, generate, quality, speed

PICTURE_LAYERS = (0, 10, 20, 29)
PICTURE_SPECS = {"masks_topk8.png": ("dynamic top-k", 8), "masks_mass90.png": ("dynamic mass", 0.9)}
STATIC_PICTURES = (("sliding window", "window", 512), ("streaming", "window", 512), ("strided", "stride", 128),
                   ("bigbird", "window_blocks", 7))
GENERATION_SPECS = [("dense", {"pattern": "causal", "block_size": 64}),
                    ("sliding window 256", {"pattern": "sliding_window", "window": 256, "block_size": 64}),
                    ("streaming 4 + 256", {"pattern": "streaming", "sink": 4, "window": 256, "block_size": 64}),
                    ("dynamic top-8 blocks of 64", {"pattern": "dynamic", "topk": 8, "block_size": 64})]
PROMPT_OFFSET = 1000
DEFAULT_SPEED_LENGTHS = {"cuda": "8192,32768,131072", "cpu": "2048"}
DEFAULT_SWEEPS = {"cuda": ["2048:alice29,plrabn12,lcet10", "8192:alice29,plrabn12,lcet10"],
                  "cpu": ["2048:alice29,plrabn12,lcet10", "8192:alice29:dense,streaming,dynamic_top-k,dynamic_mass"]}


def machine(device: torch.device) -> dict:
    """The machine's description and the slug that names its results folder."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return {"device": name, "slug": "cuda-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")}
    cpu = platform.processor() or "cpu"
    try:
        models = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = models[0].strip() if models else cpu
    except OSError:
        pass
    threads = torch.get_num_threads()
    slug = re.sub(r"[^a-z0-9]+", "-", cpu.lower()).strip("-") + f"-{threads}t"
    return {"device": f"{cpu}, {threads} threads", "slug": "cpu-" + slug}


def parse_sweep(value: str) -> tuple:
    parts = value.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or int(parts[0]) < 2:
        raise argparse.ArgumentTypeError(f"--sweep wants LENGTH:TEXT,...[:FAMILY,...], got {value!r}")
    texts = parts[1].split(",")
    unknown = [t for t in texts if t not in assets.TEXTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"--sweep: unknown texts {unknown} (known: {', '.join(assets.TEXTS)})")
    known = list(dict.fromkeys(family for family, _ in families.specs()))
    wanted = [f.replace("_", " ") for f in parts[2].split(",")] if len(parts) == 3 else known
    unknown = [f for f in wanted if f not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"--sweep: unknown families {unknown} (known: {', '.join(known)})")
    return int(parts[0]), texts, wanted


def parse_lengths(value: str) -> list:
    try:
        lengths = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--speed-lengths wants N,... (tokens), got {value!r}") from None
    if any(n < 2 for n in lengths):
        raise argparse.ArgumentTypeError(f"--speed-lengths: every length must be >= 2, got {value!r}")
    return lengths


def arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m spattn.integrations.smollm", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--cache", type=Path, default=None, help="model and texts (default: assets.default_cache())")
    parser.add_argument("--out-dir", type=Path, default=None)
    parser.add_argument("--sweep", type=parse_sweep, action="append", default=None)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--no-generate", action="store_true")
    parser.add_argument("--speed-lengths", type=parse_lengths, default=None)
    args = parser.parse_args(argv)
    if args.new_tokens < 1 or args.prompt_tokens < 1:
        parser.error(f"--new-tokens and --prompt-tokens must be >= 1, got {args.new_tokens}, {args.prompt_tokens}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: PyTorch sees no GPU")
    return args


def pictures(results: list, out_dir: Path, title: str) -> list:
    """Mask PNGs from the first sweep's first text; returns their file names."""
    first = [(row, stats) for row, stats in results
             if row["text"] == results[0][0]["text"] and row["tokens"] == results[0][0]["tokens"]]
    written = []
    for name, (family, budget) in PICTURE_SPECS.items():
        for row, stats in first:
            if row["pattern"] == family and budget in (row["parameters"].get("topk"), row["parameters"].get("tau")):
                panels = [(f"layer {layer}, kv head {head}", stats.masks[layer], head)
                          for layer in PICTURE_LAYERS if layer in stats.masks
                          for head in range(stats.masks[layer].num_heads)]
                figures.plot_masks(panels, f"{family} {budget}: {title}", out_dir / name, columns=3)
                written.append(name)
    static = []
    for family, keyword, value in STATIC_PICTURES:
        for row, stats in first:
            if row["pattern"] == family and row["parameters"].get(keyword) == value and stats.masks:
                shown = " ".join(f"{k}={v}" for k, v in row["parameters"].items() if k not in ("block_size", "causal"))
                static.append((f"{family}\n{shown}", next(iter(stats.masks.values())), 0))
    if static:
        figures.plot_masks(static, f"static patterns: {title}", out_dir / "masks_static.png", columns=len(static))
        written.append("masks_static.png")
    return written


def main(argv=None) -> int:
    args = arguments(argv)
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    sweeps = args.sweep or [parse_sweep(value) for value in DEFAULT_SWEEPS[device.type]]
    where = machine(device)
    out_dir = args.out_dir or Path("bench/results") / where["slug"]
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = assets.load_texts(args.cache)
    model, tokenizer = assets.load_model(args.cache, device)
    doc = {"model": assets.MODEL_NAME, "model_package": "==".join(assets.MODEL_PACKAGE),
           "text_package": "==".join(assets.TEXT_PACKAGE), "machine": where["device"],
           "dtype": str(assets.model_dtype(device)).removeprefix("torch."),
           "spattn_cuda": spattn.built_with_cuda(), "torch": torch.__version__, "generation": [], "rows": [],
           "speed": []}
    if not args.no_generate:
        prompts = {}
        for name in ("alice29", "plrabn12"):
            ids = quality.tokens_of(tokenizer, texts[name], PROMPT_OFFSET + args.prompt_tokens, device)
            prompts[name] = ids[:, PROMPT_OFFSET:]
        doc["generation"] = generate.side_by_side(model, tokenizer, prompts, GENERATION_SPECS, args.new_tokens)
        generate.print_side_by_side(doc["generation"])
    results = []
    for length, text_names, wanted in sweeps:
        specs = [(family, spec) for family, spec in families.specs() if family in wanted]
        results += quality.sweep(model, tokenizer, {n: texts[n] for n in text_names}, length, specs,
                                 assets.MODEL_NAME, keep_masks_of_layers=PICTURE_LAYERS)
    doc["rows"] = [row for row, _ in results]
    title = f"{assets.MODEL_NAME}, {doc['dtype']}, {where['device']}"
    for sdpa in (row for row in doc["rows"] if row["implementation"] == "sdpa"):
        ours = next(row for row in doc["rows"] if row["pattern"] == "dense" and row["implementation"] != "sdpa"
                    and (row["text"], row["tokens"]) == (sdpa["text"], sdpa["tokens"]))
        gap = abs(sdpa["perplexity"] - ours["perplexity"]) / sdpa["perplexity"]
        print(f"{sdpa['text']} {sdpa['tokens']}: dense perplexity sdpa {sdpa['perplexity']:.4f}, "
              f"spattn {ours['perplexity']:.4f} (relative gap {gap:.1e})")
    written = ["demo.json"]
    if doc["rows"]:
        figures.plot_quality(doc["rows"], title, out_dir / "quality.png")
        written += ["quality.png"] + pictures(results, out_dir, f"{results[0][0]['text']}, "
                                              f"first {results[0][0]['tokens']} tokens")
    # Written before the speed runs and again after them, so that the quality
    # results survive a speed run that is stopped.
    (out_dir / "demo.json").write_text(json.dumps(doc, indent=1) + "\n")
    lengths = args.speed_lengths if args.speed_lengths is not None else parse_lengths(
        DEFAULT_SPEED_LENGTHS[device.type])
    if lengths:
        doc["speed"] = speed.prefill_rows(model, lengths)
        (out_dir / "demo.json").write_text(json.dumps(doc, indent=1) + "\n")
        doc["speed"] += speed.attention_rows(model, lengths)
        (out_dir / "demo.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {', '.join(str(out_dir / name) for name in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
