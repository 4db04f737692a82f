"""Hugging Face transformers: a small random GPT-2 with attn_implementation="spattn".

No download: the model is built from a GPT2Config with random weights. With
the causal pattern the logits equal the "sdpa" implementation's; with a
sliding window they equal SDPA given the same explicit boolean mask.
"""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

import spattn  # noqa: E402
from spattn.integrations import hf  # noqa: E402

L = 45


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=97)
    reference = GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation="spattn").eval()
    assert reference.config._attn_implementation == "sdpa"
    assert ours.config._attn_implementation == "spattn"
    ours.load_state_dict(reference.state_dict())
    tokens = torch.randint(0, 97, (2, L), generator=torch.Generator().manual_seed(1))
    return reference, ours, tokens


def test_causal_logits_equal_sdpa(models):
    reference, ours, tokens = models
    with torch.no_grad():
        want = reference(tokens).logits
        got = ours(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_sliding_window_equals_sdpa_with_the_same_mask(models):
    reference, ours, tokens = models
    window = 8
    i = torch.arange(L)
    allowed = (i.view(-1, 1) >= i.view(1, -1)) & (i.view(-1, 1) - i.view(1, -1) < window)
    with torch.no_grad():
        want = reference(tokens, attention_mask=allowed.expand(2, 1, L, L)).logits
        with hf.use_pattern({"pattern": "sliding_window", "window": window, "block_size": 16}):
            got = ours(tokens).logits
        plain = ours(tokens).logits  # outside the block: causal again
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert (plain - got).abs().max() > 1e-3


def test_pattern_from_config_and_cached_generation(models):
    reference, ours, tokens = models
    ours.config.spattn_pattern = {"pattern": "streaming", "sink": 2, "window": 6, "block_size": 16}
    try:
        i = torch.arange(L)
        allowed = (i.view(-1, 1) >= i.view(1, -1)) & ((i.view(1, -1) < 2) | (i.view(-1, 1) - i.view(1, -1) < 6))
        with torch.no_grad():
            want = reference(tokens, attention_mask=allowed.expand(2, 1, L, L)).logits
            got = ours(tokens).logits
            # Decoding one token with the KV cache sees the last row of the mask.
            prefix = ours(tokens[:, :-1], use_cache=True)
            step = ours(tokens[:, -1:], past_key_values=prefix.past_key_values).logits
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(step[:, -1], want[:, -1], rtol=1e-4, atol=1e-4)
    finally:
        del ours.config.spattn_pattern


def test_padding_and_bad_specs_are_rejected(models):
    _, ours, tokens = models
    padding = torch.ones_like(tokens)
    padding[0, :3] = 0
    with pytest.raises(ValueError, match="padding or custom attention_mask"):
        ours(tokens, attention_mask=padding)
    with pytest.raises(ValueError, match="unknown pattern 'nope'"):
        with hf.use_pattern({"pattern": "nope"}):
            pass
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens, attention_mask=torch.ones_like(tokens)).logits,
                                   ours(tokens).logits)
    assert isinstance(hf.mask_for(ours.transformer.h[0].attn, L, L, 4, torch.device("cpu")), spattn.BlockMask)
