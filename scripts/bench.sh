#!/usr/bin/env bash
# The main job: builds spattn and runs `spattn bench` on the best backend
# present (CUDA where a GPU exists, else the CPU), printing the summary table,
# then writes plots and mask pictures under results/. Extra arguments go to
# `spattn bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p results
build/tools/spattn bench --out results/bench.json "$@"
.venv/bin/python bench/plot.py results/bench.json --out-dir results
for pattern in causal sliding-window streaming bigbird dilated; do
  build/tools/spattn mask --pattern "$pattern" --seq 4096 --block 64 --out "results/mask_${pattern}.png" >/dev/null
done
echo "results: table above; JSON, plots and mask pictures in $(pwd)/results"
