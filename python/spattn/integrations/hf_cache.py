"""A paged KV cache for Hugging Face generation through ``spattn.attention_with_kvcache``.

    cache = SpattnPagedCache(model.config, max_length=4096, page_size=16)
    model.set_attn_implementation("spattn")
    with hf.use_pattern({"pattern": "streaming", "sink": 4, "window": 512}):
        out = model.generate(ids, past_key_values=cache, max_new_tokens=64)

Each layer keeps its keys and values in pages (num_pages, page_size, Hkv, D)
with a page table, cache lengths and the pages' key summaries. Its
``update`` does not concatenate: it hands the step's new keys to the
"spattn" attention function (``hf.spattn_attention_forward``), which appends
them and attends in one ``attention_with_kvcache`` call, reading only the
pages the pattern keeps. Static specs apply their pattern at each step's
lengths (the spec's ``block_size`` is the query block; key blocks are pages);
a dynamic spec chooses ``topk`` pages per kv head with ``select_pages``
(Quest) on every step after the prompt, whose prefill is causal. CPU and
CUDA tensors, as ``attention_with_kvcache``. The cache serves the "spattn"
implementation only: a step that another implementation ran is an error.
"""
from __future__ import annotations

import json
import math

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

import spattn

# The layer whose update handed over these new keys, by the keys' id; taken by the attention function.
_pending: dict = {}


class SpattnPagedLayer(CacheLayerMixin):
    """One layer's paged cache: pages, page table, lengths and page summaries, made on the first update."""

    is_sliding = False

    def __init__(self, max_length: int, page_size: int):
        super().__init__()
        self.max_length, self.page_size = max_length, page_size
        self.length = 0
        self.pending = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, kv_heads, _, dim = key_states.shape
        self.max_pages = math.ceil(self.max_length / self.page_size)
        num_pages = batch * self.max_pages
        self.dtype, self.device = key_states.dtype, key_states.device
        self.k_pages = key_states.new_zeros(num_pages, self.page_size, kv_heads, dim)
        self.v_pages = value_states.new_zeros(num_pages, self.page_size, kv_heads, dim)
        self.page_table = torch.arange(num_pages, dtype=torch.int32, device=self.device).reshape(batch, -1)
        self.page_min = torch.zeros(num_pages, kv_heads, dim, dtype=torch.float32, device=self.device)
        self.page_max = torch.zeros_like(self.page_min)
        self.lengths = torch.zeros(batch, dtype=torch.int32, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Hands the new keys (B, Hkv, L_new, D) to the attention function, which appends them."""
        if self.pending is not None:
            raise RuntimeError("SpattnPagedCache serves the 'spattn' attention implementation only: the previous "
                               "step's keys were not appended (call model.set_attn_implementation('spattn'))")
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.length + key_states.shape[2] > self.max_length:
            raise ValueError(f"SpattnPagedCache: {self.length} cached + {key_states.shape[2]} new keys exceed "
                             f"max_length={self.max_length}")
        self.pending = (key_states, value_states)
        _pending[id(key_states)] = self
        return key_states, value_states

    def appended(self, new_keys: int) -> None:
        self.length += new_keys
        self.lengths += new_keys
        self.pending = None

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    def get_max_length(self) -> int:
        return self.max_length


class SpattnPagedCache(Cache):
    """A ``transformers`` cache of one ``SpattnPagedLayer`` per decoder layer (see the module docstring)."""

    def __init__(self, config, max_length: int, page_size: int = 16):
        if not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be an int >= 1, got {max_length!r}")
        if not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        layers = config.get_text_config().num_hidden_layers
        super().__init__(layers=[SpattnPagedLayer(max_length, page_size) for _ in range(layers)])


def take_pending(key: torch.Tensor):
    """The paged layer whose update returned `key` (then forgotten), or None."""
    layer = _pending.pop(id(key), None)
    if layer is None or layer.pending is None or layer.pending[0] is not key:
        return None
    return layer


def _static_mask(spec: dict, layer: SpattnPagedLayer, num_heads: int):
    """The BlockMask whose pattern (and query block) a static spec gives every step."""
    from spattn.integrations import hf

    spec = dict(spec)
    spec.setdefault("block_size", layer.page_size)
    return hf._mask_from_json(json.dumps(spec, sort_keys=True), layer.page_size, layer.page_size, num_heads, "cpu")


def paged_attention_forward(module, query: torch.Tensor, layer: SpattnPagedLayer, scaling):
    """Appends the layer's pending keys and attends in one call; returns out (B, Lq, Hq, D)."""
    from spattn.integrations import hf

    key, value = layer.pending
    q = query.transpose(1, 2)
    spec = hf.spec_for(module)
    if callable(spec):
        raise ValueError("SpattnPagedCache takes dict pattern specs (a callable spec builds masks of given lengths)")
    arguments = dict(cache_seqlens=layer.lengths, page_table=layer.page_table, page_min=layer.page_min,
                     page_max=layer.page_max, scale=scaling)
    if spec["pattern"] == hf.DYNAMIC:
        if "topk" not in spec or "tau" in spec:
            raise ValueError("SpattnPagedCache: a dynamic spec chooses pages by topk (Quest); tau is not supported")
        batch, kv_heads = key.shape[0], key.shape[1]
        if layer.length == 0:  # the prompt: causal over its own pages
            pages = torch.full((batch, kv_heads, 1), -1, dtype=torch.int32, device=q.device)
        else:
            pages = spattn.select_pages(q, layer.page_min, layer.page_max, layer.lengths, layer.page_table,
                                        page_size=layer.page_size, topk=spec["topk"],
                                        sink_pages=spec.get("sink_blocks", 1), local_pages=spec.get("local_blocks", 1))
        arguments["pages"] = pages
    else:
        arguments["mask"] = _static_mask(spec, layer, query.shape[1])
    out = spattn.attention_with_kvcache(q, layer.k_pages, layer.v_pages, key.transpose(1, 2), value.transpose(1, 2),
                                        **arguments)
    layer.appended(key.shape[2])
    return out
