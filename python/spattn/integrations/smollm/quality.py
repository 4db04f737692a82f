"""Quality of a pattern on the real model: perplexity, attention recall and density per layer.

Perplexity is exp of the mean next-token negative log-likelihood over the
first N tokens of a text, one forward pass (every query attends with the
pattern, as in a prefill). While it runs, ``hf.observe`` hands each layer's
post-RoPE q, k and masks to ``LayerStats``, which measures per layer:

- recall: the dense softmax mass the kept keys capture, averaged over heads
  and query rows. A row's mass on the allowed keys is exp(lse_mask -
  lse_causal), the two LSEs from ``spattn.attention`` on the layer's own q
  and k (no L x L matrix is formed);
- density: allowed pairs over the pairs of causal attention (1 for dense).

The dense reference of recall is the same layer's causal attention, so the
numbers of later layers include how the earlier layers' pattern moved q and k.
"""
from __future__ import annotations

import contextlib
import math
import time

import torch
import torch.nn.functional as F

import spattn
from spattn import patterns
from spattn.integrations import hf
from spattn.integrations.smollm import families

LM_HEAD_CHUNK = 1024


class LayerStats:
    """The ``hf.observe`` callback: recall and density of every layer, masks of chosen layers."""

    def __init__(self, keep_masks_of_layers=()):
        self.recall = {}
        self.density = {}
        self.masks = {}
        self._keep = set(keep_masks_of_layers)
        self._causal = {}

    def _causal_mask(self, q_len, k_len, block_size, device):
        key = (q_len, k_len, block_size, str(device))
        if key not in self._causal:
            self._causal[key] = patterns.causal(q_len, k_len, block_size=block_size, device=device)
        return self._causal[key]

    def __call__(self, module, query, key, masks):
        layer = module.layer_idx
        causal = self._causal_mask(query.shape[2], key.shape[2], masks[0].block_size, query.device)
        recall, density = [], []
        for b, mask in enumerate(masks):
            q, k = query[b:b + 1], key[b:b + 1]
            _, lse_mask = spattn.attention(q, k, k, mask, scale=module.scaling, return_lse=True)
            _, lse_all = spattn.attention(q, k, k, causal, scale=module.scaling, return_lse=True)
            recall.append(torch.exp(lse_mask - lse_all).mean().item())
            density.append(mask.density / causal.density)
        self.recall[layer] = sum(recall) / len(recall)
        self.density[layer] = sum(density) / len(density)
        if layer in self._keep:
            self.masks[layer] = masks[0]


def tokens_of(tokenizer, text: str, length: int, device) -> torch.Tensor:
    """The first `length` tokens of `text`, shape (1, length)."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if len(ids) < length:
        raise ValueError(f"the text has {len(ids)} tokens, fewer than length={length}")
    return torch.tensor([ids[:length]], device=device)


def perplexity(model, ids: torch.Tensor) -> float:
    """exp(mean NLL of ids[1:] given the prefix), the LM head applied in chunks."""
    if ids.shape[1] < 2:
        raise ValueError(f"perplexity needs at least 2 tokens, got {ids.shape[1]}")
    with torch.no_grad():
        hidden = model.base_model(input_ids=ids).last_hidden_state
        head = model.get_output_embeddings()
        total = 0.0
        for start in range(0, ids.shape[1] - 1, LM_HEAD_CHUNK):
            stop = min(start + LM_HEAD_CHUNK, ids.shape[1] - 1)
            logits = head(hidden[:, start:stop]).float()
            total += F.cross_entropy(logits[0], ids[0, start + 1:stop + 1], reduction="sum").item()
    return math.exp(total / (ids.shape[1] - 1))


def measure(model, ids: torch.Tensor, family: str, spec, implementation: str = "spattn",
            keep_masks_of_layers=()) -> tuple:
    """(row, LayerStats) of one pattern: perplexity, mean and per-layer recall and density."""
    model.set_attn_implementation(implementation)
    stats = LayerStats(keep_masks_of_layers)
    started = time.perf_counter()
    with contextlib.ExitStack() as scope:
        if implementation == hf.NAME:
            scope.enter_context(hf.use_pattern(spec))
            scope.enter_context(hf.observe(stats))
        value = perplexity(model, ids)
    seconds = time.perf_counter() - started
    layers = sorted(stats.recall)
    row = {"tokens": ids.shape[1], "pattern": family, "implementation": implementation,
           "parameters": families.parameters(spec) if spec else {}, "perplexity": value,
           "density": sum(stats.density.values()) / len(layers) if layers else 1.0,
           "recall": sum(stats.recall.values()) / len(layers) if layers else 1.0,
           "density_per_layer": [stats.density[n] for n in layers],
           "recall_per_layer": [stats.recall[n] for n in layers], "seconds": seconds}
    return row, stats


def sweep(model, tokenizer, texts: dict, length: int, specs: list, model_name: str,
          keep_masks_of_layers=(), reference: bool = True, log=print) -> list:
    """[(row, LayerStats)] of every (family, spec) on the first `length` tokens of each text.

    With `reference`, each text starts with dense attention through ``sdpa``,
    which the spattn dense row must equal.
    """
    results = []
    device = next(model.parameters()).device
    for text_name, text in texts.items():
        ids = tokens_of(tokenizer, text, length, device)
        runs = [("dense", None, "sdpa")] if reference else []
        runs += [(family, spec, hf.NAME) for family, spec in specs]
        for family, spec, implementation in runs:
            row, stats = measure(model, ids, family, spec, implementation, keep_masks_of_layers)
            row = {"model": model_name, "text": text_name, **row}
            log(f"{text_name} {length} {family} ({implementation}) {row['parameters']}: perplexity "
                f"{row['perplexity']:.3f} density {row['density']:.3f} recall {row['recall']:.3f} "
                f"[{row['seconds']:.1f} s]")
            results.append((row, stats))
    return results
