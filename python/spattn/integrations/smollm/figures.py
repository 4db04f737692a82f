"""The demo's PNGs: perplexity against density, and the block masks chosen on the real text.

Uses matplotlib's Agg backend. Every figure's title names the model, the
tokens and the machine. A mask picture shows one mask head's block grid
(query blocks down, key blocks across): full blocks dark, partial blocks
(the causal diagonal, a window's edges) lighter, skipped blocks white.

`python python/spattn/integrations/smollm/figures.py DEMO.json` redraws
quality.png from a saved run.
"""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

PARTIAL, FULL = 1, 2


def block_grid(mask, head: int = 0) -> np.ndarray:
    """(query blocks, key blocks) of 0 skipped, 1 partial, 2 full for one mask head."""
    rows = -(-mask.q_len // mask.block_size[0])
    cols = -(-mask.k_len // mask.block_size[1])
    offsets = mask.row_offsets.cpu().numpy()
    indices = mask.kv_indices.cpu().numpy()
    full = mask.kv_full.cpu().numpy()
    grid = np.zeros((rows, cols), dtype=np.int8)
    for row in range(rows):
        begin, end = offsets[head * rows + row], offsets[head * rows + row + 1]
        grid[row, indices[begin:end]] = np.where(full[begin:end] != 0, FULL, PARTIAL)
    return grid


def plot_quality(rows: list, title: str, path) -> None:
    """Perplexity (log) against density, one panel per (text, tokens), one curve per family."""
    panels = list(dict.fromkeys((row["text"], row["tokens"]) for row in rows))
    # One colour per family in every panel.
    families = [f for f in dict.fromkeys(row["pattern"] for row in rows) if not f.startswith("dense")]
    colour = {family: f"C{n % 10}" for n, family in enumerate(families)}
    figure, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for axis, (text, tokens) in zip(axes[0], panels):
        here = [row for row in rows if row["text"] == text and row["tokens"] == tokens]
        for family in dict.fromkeys(row["pattern"] for row in here):
            points = sorted((row["density"], row["perplexity"]) for row in here if row["pattern"] == family)
            if family.startswith("dense"):
                axis.axhline(points[0][1], color="black", linestyle="--", linewidth=0.8,
                             label=f"{family} {points[0][1]:.2f}")
                continue
            axis.plot(*zip(*points), marker="o", markersize=3.5, label=family, color=colour[family])
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("density (allowed pairs / causal pairs)")
        axis.set_ylabel("perplexity")
        axis.set_title(f"{text}, first {tokens} tokens", fontsize=9)
        axis.grid(True, which="both", alpha=0.3)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    # Each panel's legend under its axes, clear of the curves (the dense line's
    # label carries that panel's perplexity).
    for axis in axes[0]:
        axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def plot_masks(panels: list, title: str, path, columns: int = 4) -> None:
    """A grid of block masks; `panels` is [(caption, BlockMask, mask head)]."""
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.8 * rows), squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for axis, (caption, mask, head) in zip(axes.flat, panels):
        axis.imshow(block_grid(mask, head), cmap="Greys", vmin=0, vmax=FULL, interpolation="nearest")
        axis.set_title(caption, fontsize=7)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)


def main(argv) -> int:
    """Redraws quality.png next to a saved demo.json (no model, no spattn needed)."""
    import json
    from pathlib import Path

    if len(argv) != 1:
        print("usage: figures.py DEMO.json   (writes quality.png next to it)", file=sys.stderr)
        return 2
    path = Path(argv[0])
    doc = json.loads(path.read_text())
    dtype = {"float32": "fp32"}.get(doc["dtype"], doc["dtype"])
    plot_quality(doc["rows"], f"{doc['model']}, {dtype}, {doc['machine']}", path.parent / "quality.png")
    print(f"wrote {path.parent / 'quality.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
