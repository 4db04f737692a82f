#!/usr/bin/env python3
"""Plots the JSON written by `spattn bench` (matplotlib, Agg backend).

usage: plot.py RESULTS.json [--out-dir DIR]

One set of PNGs per preset, named after it, every figure titled with the
machine, backend, dtype and shapes of the run, its legend right of the axes:
  default:    <stem>_times.png   time vs sequence length per pattern (log-log):
                                 fused sparse, fused dense, naive dense baseline
              <stem>_speedup.png speedup over dense vs sequence length, all patterns
  seeds:      <stem>_times.png   naive dense, fused dense, fused sparse vs T per pattern
  mask-build: <stem>_mask_build.png  BlockMask::build time per pattern
<stem> is the JSON file's name without its extension.
"""

import argparse
import json
import math
import os
import sys
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def by_pattern(results):
    """Groups result rows by pattern, keeping the order of first appearance."""
    groups = OrderedDict()
    for row in results:
        groups.setdefault(row["pattern"], []).append(row)
    for rows in groups.values():
        rows.sort(key=lambda r: r["seq"])
    return groups


def run_title(doc):
    machine = doc.get("machine", {})
    where = machine.get("gpu") or machine.get("cpu", "unknown machine")
    parts = [f"spattn bench, preset {doc.get('preset')}", where]
    if "backend" in doc:
        parts.append(
            f"backend {doc['backend']}, {doc['dtype']}, B={doc['batch']} "
            f"Hq={doc['heads']} Hkv={doc['kv_heads']} D={doc['head_dim']}"
        )
    return "\n".join(parts)


def grid_for(count):
    cols = min(3, count)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows + 0.9), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return fig, list(axes.flat[:count])


def log_axes(ax, xlabel):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("time (ms)")
    ax.grid(True, which="both", alpha=0.3)


def series(rows, key):
    points = [(r["seq"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def legend_right(fig, ax):
    """One legend for the figure, right of its axes (`ax` holds every series)."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)


def save(fig, path):
    """Lays out, then saves with the legends outside the axes included."""
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")


def plot_default(doc, stem):
    groups = by_pattern(doc["results"])
    fig, axes = grid_for(len(groups))
    for ax, (pattern, rows) in zip(axes, groups.items()):
        for key, label, style in (
            ("time_ms", "sparse (fused)", "o-"),
            ("dense_time_ms", "dense (fused)", "s--"),
            ("naive_time_ms", "naive dense baseline", "^:"),
        ):
            xs, ys = series(rows, key)
            if xs:
                ax.plot(xs, ys, style, label=label)
        density = rows[-1]["density"]
        ax.set_title(f"{pattern} (density {density:.3g} at L={rows[-1]['seq']})", fontsize=10)
        log_axes(ax, "sequence length L")
    fig.suptitle(run_title(doc), fontsize=10)
    fig.tight_layout()
    legend_right(fig, max(axes, key=lambda a: len(a.get_lines())))
    save(fig, f"{stem}_times.png")

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for pattern, rows in groups.items():
        xs, ys = series(rows, "speedup")
        ax.plot(xs, ys, "o-", label=pattern)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("speedup over dense (same backend)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(run_title(doc), fontsize=9)
    fig.tight_layout()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, title="pattern")
    save(fig, f"{stem}_speedup.png")


def plot_seeds(doc, stem):
    groups = by_pattern(doc["results"])
    fig, axes = grid_for(len(groups))
    for ax, (pattern, rows) in zip(axes, groups.items()):
        for key, label, style in (
            ("naive_dense_time_ms", "naive dense", "^:"),
            ("dense_time_ms", "fused dense", "s--"),
            ("time_ms", "fused sparse (the panel's pattern)", "o-"),
        ):
            xs, ys = series(rows, key)
            ax.plot(xs, ys, style, label=label)
        ax.set_title(f"{pattern}: {rows[0]['flags']}", fontsize=9)
        log_axes(ax, "sequence length T")
    fig.suptitle(run_title(doc), fontsize=10)
    fig.tight_layout()
    legend_right(fig, axes[0])
    save(fig, f"{stem}_times.png")


def plot_mask_build(doc, stem):
    rows = doc["results"]
    labels = [f"{r['pattern']} (L={r['seq']})" for r in rows]
    times = [r["build_ms"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.6))
    bars = ax.barh(range(len(rows)), times, color="#21529a")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("BlockMask::build time (ms)")
    for bar, row in zip(bars, rows):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {row['blocks_kept']:,} blocks", va="center", fontsize=7)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.set_title(run_title(doc), fontsize=9)
    fig.tight_layout()
    save(fig, f"{stem}_mask_build.png")


PLOTTERS = {"default": plot_default, "seeds": plot_seeds, "mask-build": plot_mask_build}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="JSON written by spattn bench --out")
    parser.add_argument("--out-dir", default=".", help="where to write the PNGs (default: .)")
    args = parser.parse_args(argv)

    with open(args.results, encoding="utf-8") as f:
        doc = json.load(f)
    preset = doc.get("preset")
    if preset not in PLOTTERS:
        parser.error(f"{args.results}: unknown preset {preset!r}")
    if not doc.get("results"):
        parser.error(f"{args.results}: no results to plot")
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, os.path.splitext(os.path.basename(args.results))[0])
    PLOTTERS[preset](doc, stem)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
