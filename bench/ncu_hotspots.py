#!/usr/bin/env python3
"""bench/ncu_hotspots.py - the hottest SASS instructions of a profiled kernel.

Reads the per-instruction CSV that Nsight Compute writes for a report
(`ncu --import R.ncu-rep --page source --csv --print-source sass > R.csv`)
and prints the instructions with the most warp-stall samples, with their share
of all samples and, where the CSV has them, the stall reasons that dominate
each one. Used by the profile stage of scripts/gpu_check.sh.

    python3 bench/ncu_hotspots.py R.csv [--top 40]
"""
import argparse
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv_path")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    with open(args.csv_path, newline="") as f:
        lines = f.readlines()
    # The table starts at its header row (a kernel-name line may come first).
    header = next((n for n, line in enumerate(lines) if "Warp Stall Sampling" in line), None)
    if header is None:
        sys.exit(f"{args.csv_path}: no warp-stall sampling column")
    rows = list(csv.DictReader(lines[header:]))
    if not rows:
        sys.exit(f"{args.csv_path}: no instruction rows")
    columns = list(rows[0].keys())
    samples = next((c for c in columns if c and c.startswith("Warp Stall Sampling (All")), None)
    if samples is None:
        sys.exit(f"{args.csv_path}: no 'Warp Stall Sampling (All Samples)' column; columns: {columns}")
    source = next((c for c in columns if c.strip().lower() == "source"), columns[1])
    address = next((c for c in columns if "address" in c.lower()), columns[0])
    reasons = [c for c in columns if c.lower().startswith("stall_") or c.startswith("smsp__pcsamp")]
    total = sum(number(r[samples]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} warp-stall samples ({samples})")
    ranked = sorted(rows, key=lambda r: number(r[samples]), reverse=True)[: args.top]
    for r in ranked:
        share = 100.0 * number(r[samples]) / total
        top_reasons = sorted(((number(r[c]), c) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{c}={v:.0f}" for v, c in top_reasons if v > 0)
        text = (r.get(source) or "").strip()[:70]
        print(f"{share:5.1f}%  {r.get(address) or '':>8}  {text:<70}  {why}")


if __name__ == "__main__":
    main()
