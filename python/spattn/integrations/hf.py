"""Hugging Face transformers integration: ``attn_implementation="spattn"``.

Importing this module registers "spattn" with ``transformers.AttentionInterface``
(and, for the padding mask, with ``AttentionMaskInterface`` as SDPA's boolean
mask). A model created with ``attn_implementation="spattn"`` then runs every
attention layer through ``spattn.attention`` with a pattern taken from, in order:

1. the innermost ``with spattn.integrations.hf.use_pattern(spec):`` block;
2. the model config's ``spattn_pattern`` attribute;
3. causal for causal layers (``module.is_causal``), dense otherwise.

A pattern spec is a dict naming a function of ``spattn.patterns`` and its
keywords, e.g. ``{"pattern": "sliding_window", "window": 256, "block_size": 64}``
(JSON-serialisable, so it can live in a config), or a callable
``(q_len, k_len, num_heads, device) -> spattn.BlockMask``. Masks are built once
per (spec, lengths, heads, device) and cached. Patterns are bottom-right
aligned, so decoding with a KV cache (Lq = 1) sees the last row of the mask.

The spec ``{"pattern": "dynamic", "topk": 8, "block_size": 64}`` (or ``"tau"``
instead of ``"topk"``; other keywords of ``spattn.select_blocks`` but
``causal``, which comes from the layer) chooses each layer's blocks from its
own q and k on every call (``spattn.dynamic_attention``). Inside
``with observe(callback):`` every layer calls ``callback(module, query, key,
masks)`` with its post-RoPE q ``(B, Hq, Lq, D)``, k ``(B, Hkv, Lk, D)`` and the
masks it used, one per batch element (quality measures, pictures).

With a ``hf_cache.SpattnPagedCache`` as ``past_key_values`` a layer instead
appends each step's keys to pages and attends over the pages its pattern keeps
(``spattn.attention_with_kvcache``; a dynamic spec chooses pages per kv head,
Quest); observers are not called on that path.

spattn has no dropout and no token-level padding mask: a layer called with
dropout > 0 or with a padding mask raises ValueError (batches without padding,
or an all-ones attention_mask, run).
"""
from __future__ import annotations

import contextlib
import json
from functools import lru_cache
from typing import Callable, Dict, Union

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

import spattn
from spattn import patterns
from spattn.block_mask import BlockMask
from spattn.integrations import hf_cache

PatternSpec = Union[Dict[str, object], Callable[..., BlockMask]]
NAME = "spattn"
DYNAMIC = "dynamic"
_DYNAMIC_KEYWORDS = ("topk", "tau", "block_size", "sink_blocks", "local_blocks", "min_blocks", "max_blocks",
                     "stride", "per_query_head")
_active_specs: list = []
_observers: list = []


@contextlib.contextmanager
def use_pattern(spec: PatternSpec):
    """Runs the models using "spattn" inside the block with pattern `spec`."""
    _check_spec(spec)
    _active_specs.append(spec)
    try:
        yield
    finally:
        _active_specs.pop()


@contextlib.contextmanager
def observe(callback: Callable):
    """Inside the block, each "spattn" layer calls ``callback(module, query, key, masks)``."""
    if not callable(callback):
        raise TypeError(f"observe needs a callable, got {type(callback).__name__}")
    _observers.append(callback)
    try:
        yield
    finally:
        _observers.remove(callback)


def _check_spec(spec) -> None:
    if callable(spec):
        return
    if not isinstance(spec, dict) or "pattern" not in spec:
        raise TypeError("a spattn pattern spec must be a dict with a 'pattern' key (a function of "
                        f"spattn.patterns, or 'dynamic') or a callable returning a BlockMask, got {spec!r}")
    name = spec["pattern"]
    if name == DYNAMIC:
        unknown = sorted(set(spec) - {"pattern", *_DYNAMIC_KEYWORDS})
        if unknown:
            raise ValueError(f"spattn dynamic spec: unknown keywords {unknown} (allowed: "
                             f"{', '.join(_DYNAMIC_KEYWORDS)}; causal comes from the layer)")
        return
    if name not in patterns.__all__ or name in ("union", "intersection", "per_head", "custom"):
        raise ValueError(f"spattn pattern spec: unknown pattern {name!r}")


@lru_cache(maxsize=64)
def _mask_from_json(spec_json: str, q_len: int, k_len: int, num_heads: int, device: str) -> BlockMask:
    spec = json.loads(spec_json)
    builder = getattr(patterns, spec.pop("pattern"))
    spec.setdefault("num_heads", num_heads)  # read only by patterns that depend on the head
    return builder(q_len, k_len, device=device, **spec)


@lru_cache(maxsize=64)
def _mask_from_callable(spec: Callable, q_len: int, k_len: int, num_heads: int, device: str) -> BlockMask:
    return spec(q_len, k_len, num_heads, torch.device(device))


def _default_spec(module) -> dict:
    return {"pattern": "causal" if getattr(module, "is_causal", True) else "dense"}


def spec_for(module) -> PatternSpec:
    """The pattern spec a layer uses now (see the module docstring for the order)."""
    config = getattr(module, "config", None)
    spec = _active_specs[-1] if _active_specs else getattr(config, "spattn_pattern", None)
    if spec is None:
        spec = _default_spec(module)
    _check_spec(spec)
    return spec


def mask_for(module, q_len: int, k_len: int, num_heads: int, device: torch.device) -> BlockMask:
    """The BlockMask a layer with a static spec uses for these lengths."""
    spec = spec_for(module)
    if not callable(spec) and spec["pattern"] == DYNAMIC:
        raise ValueError("a dynamic spec has no mask before the layer's q and k are known")
    if callable(spec):
        return _mask_from_callable(spec, q_len, k_len, num_heads, str(device))
    return _mask_from_json(json.dumps(spec, sort_keys=True), q_len, k_len, num_heads, str(device))


def spattn_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, attention_mask, dropout: float = 0.0,
                             scaling: float | None = None, **kwargs):
    """The attention function registered as "spattn": returns (out (B, L, H, D), None)."""
    if attention_mask is not None:
        raise ValueError("spattn attention got a padding or custom attention_mask; it supports "
                         "batches without padding (attention_mask None or all ones)")
    if dropout:
        raise ValueError(f"spattn attention has no dropout; got dropout={dropout} (call model.eval())")
    paged = hf_cache.take_pending(key)
    if paged is not None:  # a SpattnPagedCache step: append and attend in one call
        return hf_cache.paged_attention_forward(module, query, paged, scaling), None
    spec = spec_for(module)
    if not callable(spec) and spec["pattern"] == DYNAMIC:
        keywords = {name: value for name, value in spec.items() if name != "pattern"}
        result = spattn.dynamic_attention(query, key, value, causal=bool(getattr(module, "is_causal", True)),
                                          scale=scaling, return_masks=bool(_observers), **keywords)
        out, masks = result if _observers else (result, None)
    else:
        mask = mask_for(module, query.shape[2], key.shape[2], query.shape[1], query.device)
        out = spattn.attention(query, key, value, mask, scale=scaling)
        masks = [mask] * query.shape[0]
    for callback in list(_observers):
        callback(module, query, key, masks)
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Registers "spattn" with transformers (done on import; safe to repeat)."""
    AttentionInterface.register(NAME, spattn_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


register()
