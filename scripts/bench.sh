#!/usr/bin/env bash
# The main job: builds the spattn command-line tool and runs `spattn bench` on
# the best backend present (CUDA where a GPU exists, else the CPU), printing
# the summary table, then writes plots and mask pictures under results/.
# Extra arguments go to `spattn bench`.
#
# With a GPU (`nvidia-smi -L` lists one) it builds in build/, configured as
# scripts/test.sh configures it (CUDA where nvcc exists). Without one it
# builds in build-bench/ with -DSPATTN_CUDA=OFF and no tests, so no time goes
# to CUDA kernels that cannot run here and test.sh's CUDA build in build/ is
# left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  build=build
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
else
  build=build-bench
  echo "bench: no CUDA device (nvidia-smi -L lists none): building without CUDA in $build/"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSPATTN_CUDA=OFF -DSPATTN_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" --target spattn_cli -j"$(nproc)"
mkdir -p results
"$build/tools/spattn" bench --out results/bench.json "$@"
.venv/bin/python bench/plot.py results/bench.json --out-dir results
for pattern in causal sliding-window streaming bigbird dilated; do
  "$build/tools/spattn" mask --pattern "$pattern" --seq 4096 --block 64 --out "results/mask_${pattern}.png" >/dev/null
done
echo "results: table above; JSON, plots and mask pictures in $(pwd)/results"
