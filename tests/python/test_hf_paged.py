"""Hugging Face generation through spattn's paged KV cache (SpattnPagedCache).

A randomly initialised small Llama (no download). With the causal pattern the
paged cache's greedy tokens equal those of the sdpa implementation with its
own cache; a streaming pattern and Quest pages (dynamic topk) generate, the
streaming result equals spattn's own non-paged streaming run, and Quest with
every page chosen equals dense; the cache refuses another implementation.
"""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from spattn.integrations import hf  # noqa: E402
from spattn.integrations.hf_cache import SpattnPagedCache  # noqa: E402


def make_models(hidden_size):
    """(spattn model, sdpa model with the same weights, prompt ids): a random Llama of 4 heads over 2."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=101, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512)
    ours = LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="spattn").eval()
    reference = LlamaForCausalLM._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    reference.load_state_dict(ours.state_dict())
    ids = torch.randint(0, 101, (2, 40), generator=torch.Generator().manual_seed(1))
    return ours, reference, ids


@pytest.fixture(scope="module")
def models():
    return make_models(64)


def generate(model, ids, spec=None, cache=None, tokens=12):
    with torch.no_grad(), (hf.use_pattern(spec) if spec else torch.no_grad()):
        return model.generate(ids, max_new_tokens=tokens, do_sample=False, past_key_values=cache,
                              attention_mask=torch.ones_like(ids))[:, ids.shape[1]:]


def test_causal_paged_generation_equals_sdpa(models):
    ours, reference, ids = models
    want = generate(reference, ids)
    cache = SpattnPagedCache(ours.config, max_length=64, page_size=16)
    assert torch.equal(generate(ours, ids, cache=cache), want)
    assert cache.get_seq_length() == 40 + 12 - 1  # the last token is produced, not cached


def test_streaming_and_quest_pages_generate(models):
    ours, _, ids = models
    streaming = {"pattern": "streaming", "sink": 4, "window": 16, "block_size": 16}
    paged = generate(ours, ids, streaming, SpattnPagedCache(ours.config, max_length=64, page_size=8))
    assert torch.equal(paged, generate(ours, ids, streaming))  # spattn's own cache, same pattern
    every_page = {"pattern": "dynamic", "topk": 8}  # 8 pages of 8 keys: the whole cache
    dense = generate(ours, ids, {"pattern": "causal", "block_size": 16})
    assert torch.equal(generate(ours, ids, every_page, SpattnPagedCache(ours.config, max_length=64, page_size=8)),
                       dense)
    few = generate(ours, ids, {"pattern": "dynamic", "topk": 2}, SpattnPagedCache(ours.config, 64, page_size=8))
    assert few.shape == dense.shape


def test_the_cache_serves_spattn_only(models):
    _, reference, ids = models
    with pytest.raises(RuntimeError, match="serves the 'spattn' attention implementation only"):
        generate(reference, ids, cache=SpattnPagedCache(reference.config, max_length=64))


@pytest.fixture(scope="module")
def cuda_models():
    ours, reference, ids = make_models(256)  # head dim 64
    return ours.to("cuda", torch.float16), reference.to("cuda", torch.float16), ids.cuda()


@pytest.mark.gpu
def test_paged_generation_on_cuda(cuda_models):
    """The CUDA decode kernels under generation (head dim 64, fp16): causal equals sdpa; streaming and
    Quest pages generate, streaming equal to spattn's own non-paged run."""
    ours, reference, ids = cuda_models
    cache = SpattnPagedCache(ours.config, max_length=64, page_size=16)
    assert torch.equal(generate(ours, ids, cache=cache), generate(reference, ids))
    streaming = {"pattern": "streaming", "sink": 4, "window": 16, "block_size": 16}
    paged = generate(ours, ids, streaming, SpattnPagedCache(ours.config, max_length=64, page_size=16))
    assert torch.equal(paged, generate(ours, ids, streaming))
    few = generate(ours, ids, {"pattern": "dynamic", "topk": 2}, SpattnPagedCache(ours.config, 64, page_size=16))
    assert few.shape == paged.shape and few.device.type == "cuda"
