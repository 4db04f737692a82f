"""The patterns the demo scores: one list of Hugging Face pattern specs per family.

Every spec is a ``spattn.integrations.hf`` spec with mask blocks of
``block_size`` tokens (64 by default: 32 blocks at 2K tokens). The static
families are those of ``spattn.patterns``; the dynamic ones choose the blocks
of each layer from its q and k (``spattn.dynamic_attention``, one selection
per kv head, the first key block and the two blocks ending at the diagonal
always kept). ``dense`` is causal attention through spattn; the sweep adds
the same model through PyTorch's ``sdpa`` as the reference it must equal.
"""
from __future__ import annotations

WINDOWS = (128, 256, 512, 1024)
STREAMING_SINK = 4
STRIDES = (64, 128, 256, 512)
BIGBIRD_WINDOW_BLOCKS = (3, 7, 15)
TOPK = (4, 8, 16)
TAU = (0.8, 0.9, 0.95, 0.99)


def specs(block_size: int = 64) -> list:
    """[(family, spec)] of the sweep, in plotting order."""
    def spec(pattern, **keywords):
        return {"pattern": pattern, "block_size": block_size, **keywords}

    rows = [("dense", spec("causal"))]
    rows += [("sliding window", spec("sliding_window", window=w)) for w in WINDOWS]
    rows += [("streaming", spec("streaming", sink=STREAMING_SINK, window=w)) for w in WINDOWS]
    rows += [("strided", spec("strided", stride=s)) for s in STRIDES]
    rows += [("bigbird", spec("bigbird", window_blocks=w, global_blocks=1, random_blocks=3, causal=True))
             for w in BIGBIRD_WINDOW_BLOCKS]
    rows += [("dynamic top-k", spec("dynamic", topk=k)) for k in TOPK]
    rows += [("dynamic mass", spec("dynamic", tau=t)) for t in TAU]
    return rows


def parameters(spec: dict) -> dict:
    """The spec's keywords without the pattern name (the results' ``parameters``)."""
    return {name: value for name, value in spec.items() if name != "pattern"}
