#!/usr/bin/env python3
"""bench/ncu_pipes.py - how busy each pipe of the SMs was in a profiled kernel.

Reads the raw-metrics CSV that Nsight Compute writes for a report
(`ncu --import R.ncu-rep --page raw --csv > R.csv`: a row of metric names, a
row of units, then one row per profiled kernel) and prints, per kernel, the
pipe metrics that the ComputeWorkloadAnalysis section collects (each pipe's
busy cycles or executed instructions as a percentage of its peak, averaged
over the SMs), issue activity and the instructions issued per cycle,
busiest first (idle pipes left out). Used by the
profile stage of scripts/gpu_check.sh.

    python3 bench/ncu_pipes.py R.csv
"""
import argparse
import csv
import re
import sys

WANTED = re.compile(r"^(sm|smsp)__(pipe_\w+|inst_executed_pipe_\w+|issue_active)\.avg\.pct_of_peak_sustained_active$|"
                    r"^(sm|smsp)__inst_(executed|issued)\.avg\.per_cycle_active$")


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv_path")
    args = parser.parse_args()
    with open(args.csv_path, newline="") as f:
        rows = [row for row in csv.reader(f)]
    header = next((n for n, row in enumerate(rows) if "Kernel Name" in row), None)
    if header is None or header + 2 > len(rows):
        sys.exit(f"ncu_pipes: no metric header row in {args.csv_path}")
    names, units = rows[header], rows[header + 1]
    kernels = rows[header + 2:]
    if not kernels:
        sys.exit(f"ncu_pipes: no profiled kernel in {args.csv_path}")
    for kernel in kernels:
        print(kernel[names.index("Kernel Name")][:100])
        values = []
        for n, name in enumerate(names):
            value = number(kernel[n]) if n < len(kernel) else None
            if WANTED.search(name) and value:
                values.append((value, name, units[n] if n < len(units) else ""))
        for value, name, unit in sorted(values, reverse=True):
            print(f"  {value:9.2f} {unit:8s} {name}")


if __name__ == "__main__":
    main()
