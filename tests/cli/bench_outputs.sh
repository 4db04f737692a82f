#!/usr/bin/env bash
# tests/cli/bench_outputs.sh - what `spattn bench` writes, preset by preset.
#
# usage: bench_outputs.sh SPATTN WORK_DIR
#
# Runs the presets default, seeds and mask-build without --out in WORK_DIR and
# checks that each wrote its own results file (results/bench.json,
# results/bench_seeds.json, results/bench_mask-build.json), that every timing
# in them has its min and max beside the median, that each case was announced
# on stderr ("[bench i/n: ...]") and that stdout is the streamed table.
set -euo pipefail
spattn=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"

fail() { echo "FAIL: $*"; exit 1; }

"$spattn" bench --seqs 128 --patterns causal,streaming --heads 1 --repeats 1 >default.out 2>default.err
"$spattn" bench --preset seeds --seqs 64,128 --repeats 1 >seeds.out 2>seeds.err
"$spattn" bench --preset mask-build --seqs 4096 --patterns dense,causal --repeats 1 >build.out 2>build.err

for f in results/bench.json results/bench_seeds.json results/bench_mask-build.json; do
  [ -s "$f" ] || fail "$f was not written"
done
grep -q '"preset": "default"' results/bench.json || fail "results/bench.json is not the default preset's"
grep -q '"preset": "seeds"' results/bench_seeds.json || fail "results/bench_seeds.json is not the seeds preset's"
grep -q '"preset": "mask-build"' results/bench_mask-build.json || fail "bench_mask-build.json is not mask-build's"

for key in time dense_time naive_time; do
  for field in "${key}_ms" "${key}_min_ms" "${key}_max_ms" "${key}_samples"; do
    grep -q "\"$field\"" results/bench.json || fail "results/bench.json lacks $field"
  done
done
grep -q '"build_min_ms"' results/bench_mask-build.json || fail "bench_mask-build.json lacks build_min_ms"
grep -q 'min-max' default.out || fail "the table has no min-max column"

grep -q '^\[bench 1/2: causal L=128\]$' default.err || fail "no progress line for the first case: $(cat default.err)"
grep -q '^\[bench 4/4: block-diagonal L=128\]$' seeds.err || fail "no progress line for the last seeds case"
grep -q '^\[bench 2/2: causal L=4096\]$' build.err || fail "no progress line in mask-build"
echo "ok"
