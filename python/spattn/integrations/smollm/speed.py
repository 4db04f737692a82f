"""Speed of the model with each pattern: prefill and attention alone, next to sdpa and FlexAttention.

- prefill: one forward pass of the whole model over N tokens (no KV cache,
  the logits of the last token only), in bf16 on CUDA (fp32 on the CPU),
  with spattn and each pattern of ``SPEED_SPECS``, PyTorch's ``sdpa`` and,
  on CUDA, Hugging Face's ``flex_attention`` (FlexAttention, causal). Up to
  the model's context (8K) the real weights; beyond it the same
  architecture with random weights (the weights do not change the speed).
- attention alone: the model's attention shape (1 sequence, 9 query heads
  over 3 kv heads, head dim 64) at each length: ``spattn.attention`` with
  each pattern, ``F.scaled_dot_product_attention`` (causal, GQA) and, on
  CUDA, compiled ``flex_attention`` with the same masks as BlockMasks.

Each time is the median of ``repeats`` runs after one warm-up run, the device
synchronised around each. A peer that fails gets a row with its error
instead of a time.
"""
from __future__ import annotations

import contextlib
import copy
import statistics
import time

import torch
import torch.nn.functional as F

import spattn
from spattn import patterns
from spattn.integrations import hf
from spattn.integrations.smollm import families, generate

SPEED_BLOCK = 128
SPEED_SPECS = [("dense", {"pattern": "causal", "block_size": SPEED_BLOCK}),
               ("sliding window", {"pattern": "sliding_window", "window": 1024, "block_size": SPEED_BLOCK}),
               ("streaming", {"pattern": "streaming", "sink": 4, "window": 1024, "block_size": SPEED_BLOCK}),
               ("dynamic top-k", {"pattern": "dynamic", "topk": 16, "block_size": SPEED_BLOCK})]


def _seconds(run, device, repeats: int) -> float:
    """Median wall time of run() over `repeats` runs after a warm-up run."""
    times = []
    for n in range(repeats + 1):
        generate.synchronize(device)
        started = time.perf_counter()
        run()
        generate.synchronize(device)
        if n:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def _timed(run, device, repeats: int, implementation: str) -> dict:
    """{ms} of run(), or {error} where a peer fails (its row then says why; spattn's errors propagate)."""
    try:
        return {"ms": _seconds(run, device, repeats) * 1e3}
    except Exception as error:  # a peer's failure is a result of the comparison, not the demo's end
        if implementation == hf.NAME:
            raise
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}


def speed_model(model, length: int):
    """The model to time at `length` tokens: a bf16 copy on CUDA (fp32 on the CPU), with random
    weights of the same architecture past the model's context."""
    dtype = torch.bfloat16 if model.device.type == "cuda" else torch.float32
    if length <= model.config.max_position_embeddings:
        return copy.deepcopy(model).to(dtype).eval()
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    config.max_position_embeddings = length
    torch.manual_seed(0)
    random = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=hf.NAME)
    return random.to(model.device).eval()


def _implementations(device) -> list:
    """[(implementation, pattern family, spec)] timed through the model."""
    runs = [("sdpa", "dense", None)]
    if device.type == "cuda":
        runs.append(("flex_attention", "dense", None))
    return runs + [(hf.NAME, family, spec) for family, spec in SPEED_SPECS]


def prefill_rows(model, lengths: list, repeats: int = 3, log=print) -> list:
    """Rows {kind: prefill, weights, tokens, implementation, pattern, parameters, ms, tokens_per_s}."""
    rows = []
    for length in lengths:
        timed = speed_model(model, length)
        weights = "real" if length <= model.config.max_position_embeddings else "random"
        torch.manual_seed(length)
        ids = torch.randint(0, timed.config.vocab_size, (1, length), device=timed.device)
        for implementation, family, spec in _implementations(timed.device):
            timed.set_attn_implementation(implementation)

            def run():
                with torch.no_grad():
                    timed(ids, use_cache=False, logits_to_keep=1)

            row = {"kind": "prefill", "weights": weights, "dtype": str(timed.dtype).removeprefix("torch."),
                   "tokens": length, "implementation": implementation, "pattern": family,
                   "parameters": families.parameters(spec) if spec else {}}
            with hf.use_pattern(spec) if spec else contextlib.nullcontext():
                row.update(_timed(run, timed.device, repeats, implementation))
            if "ms" in row:
                row["tokens_per_s"] = length / (row["ms"] / 1e3)
            log(f"prefill {length} ({weights} weights) {implementation} {family}: "
                + (f"{row['ms']:.1f} ms, {row['tokens_per_s']:.0f} tokens/s" if "ms" in row else row["error"]))
            rows.append(row)
        del timed
    return rows


def _flex_mask_mod(spec: dict, length: int):
    """The FlexAttention mask_mod of a static spec (bottom-right aligned, Lq = Lk)."""
    if spec["pattern"] == "causal":
        return lambda b, h, q, k: k <= q
    if spec["pattern"] == "sliding_window":
        window = spec["window"]
        return lambda b, h, q, k: (k <= q) & (q - k < window)
    if spec["pattern"] == "streaming":
        sink, window = spec["sink"], spec["window"]
        return lambda b, h, q, k: (k <= q) & ((k < sink) | (q - k < window))
    raise ValueError(f"no FlexAttention mask for {spec['pattern']!r}")


def attention_rows(model, lengths: list, repeats: int = 10, log=print) -> list:
    """Rows {kind: attention, tokens, implementation, pattern, parameters, ms} at the model's shape."""
    config, device = model.config, model.device
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    hq, hkv = config.num_attention_heads, config.num_key_value_heads
    d = config.hidden_size // hq
    flex = None
    if device.type == "cuda":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
    rows = []
    for length in lengths:
        generator = torch.Generator(device=device).manual_seed(length)
        q = torch.randn(1, hq, length, d, device=device, dtype=dtype, generator=generator)
        k = torch.randn(1, hkv, length, d, device=device, dtype=dtype, generator=generator)
        v = torch.randn(1, hkv, length, d, device=device, dtype=dtype, generator=generator)
        runs = [("sdpa", "dense", None,
                 lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))]
        for family, spec in SPEED_SPECS:
            if spec["pattern"] == hf.DYNAMIC:
                keywords = {name: value for name, value in spec.items() if name != "pattern"}
                runs.append((hf.NAME, family, spec,
                             lambda keywords=keywords: spattn.dynamic_attention(q, k, v, causal=True, **keywords)))
                continue
            builder = getattr(patterns, spec["pattern"])
            mask = builder(length, length, device=device, **families.parameters(spec))
            runs.append((hf.NAME, family, spec, lambda mask=mask: spattn.attention(q, k, v, mask)))
            if flex is not None:
                # compiled, so that no length x length mask is formed on the way
                block_mask = create_block_mask(_flex_mask_mod(spec, length), None, None, length, length,
                                               device=device, _compile=True)
                runs.append(("flex_attention", family, spec,
                             lambda block_mask=block_mask: flex(q, k, v, block_mask=block_mask, enable_gqa=True)))
        for implementation, family, spec, run in runs:
            row = {"kind": "attention", "dtype": str(dtype).removeprefix("torch."), "tokens": length,
                   "heads": f"{hq}/{hkv}", "head_dim": d, "implementation": implementation, "pattern": family,
                   "parameters": families.parameters(spec) if spec else {},
                   **_timed(run, device, repeats, implementation)}
            log(f"attention {length} {implementation} {family}: "
                + (f"{row['ms']:.3f} ms" if "ms" in row else row["error"]))
            rows.append(row)
    return rows
