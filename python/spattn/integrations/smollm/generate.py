"""Greedy generation with several patterns side by side, with prefill and decode speed.

The prompt is a passage of a book; each pattern prefills it and then decodes
one token at a time through the KV cache (a decoding query is the last row of
the pattern, bottom-right aligned; the dynamic selection scores the key
blocks against that one query). The loop is plain greedy decoding, as
``model.generate(do_sample=False)``, written out so prefill and decode are
timed apart.
"""
from __future__ import annotations

import time

import torch

from spattn.integrations import hf
from spattn.integrations.smollm import families


def synchronize(device) -> None:
    """Waits for the device's queued work (CUDA); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def greedy(model, ids: torch.Tensor, new_tokens: int, spec) -> dict:
    """{tokens, prefill_tokens_per_s, decode_tokens_per_s} of greedy decoding with `spec`."""
    model.set_attn_implementation(hf.NAME)
    generated = []
    with torch.no_grad(), hf.use_pattern(spec):
        synchronize(ids.device)
        started = time.perf_counter()
        out = model(ids, use_cache=True)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        synchronize(ids.device)
        prefilled = time.perf_counter()
        generated.append(token)
        for _ in range(new_tokens - 1):
            out = model(token, past_key_values=out.past_key_values, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            generated.append(token)
        synchronize(ids.device)
        done = time.perf_counter()
    return {"tokens": torch.cat(generated, 1)[0].tolist(),
            "prefill_tokens_per_s": ids.shape[1] / (prefilled - started),
            "decode_tokens_per_s": (new_tokens - 1) / (done - prefilled) if new_tokens > 1 else None}


def side_by_side(model, tokenizer, prompts: dict, specs: list, new_tokens: int) -> list:
    """Rows {prompt, pattern, parameters, text, speeds} for every prompt and (name, spec)."""
    rows = []
    for prompt_name, ids in prompts.items():
        for name, spec in specs:
            result = greedy(model, ids, new_tokens, spec)
            rows.append({"prompt": prompt_name, "prompt_tokens": ids.shape[1], "pattern": name,
                         "parameters": families.parameters(spec),
                         "text": tokenizer.decode(result.pop("tokens")), **result})
    return rows


def print_side_by_side(rows: list, width: int = 100) -> None:
    for prompt in dict.fromkeys(row["prompt"] for row in rows):
        print(f"\n== {prompt}")
        for row in (r for r in rows if r["prompt"] == prompt):
            speed = (f"prefill {row['prompt_tokens']} tok at {row['prefill_tokens_per_s']:.0f} tok/s, "
                     f"decode {row['decode_tokens_per_s']:.1f} tok/s")
            print(f"-- {row['pattern']:<28} {speed}")
            print("   " + " ".join(row["text"].split())[:width * 3])
