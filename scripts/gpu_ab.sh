#!/usr/bin/env bash
# scripts/gpu_ab.sh - same-run A/B timing of the fused CUDA kernels: this
# source tree against another one (a baseline exported beside it, e.g. with
# `git archive <ref> src include | tar x -C .ab-base`), both built for one
# architecture, then timed in alternating rounds on the same card so that
# clock and thermal drift fall on both sides alike.
#
#   scripts/gpu_ab.sh BASE_DIR
#
# BASE_DIR holds the baseline's src/ and include/ (the rest of the build,
# bench/ included, is taken from this tree). Environment: CASES (default
# dense,causal,window,streaming,bigbird,dilated), SHAPES (default 32768x16),
# ROUNDS (default 2), KERNEL (--kernel of spattn_cuda_bench, default fused),
# HEAD_DIM (default 128), CUDA_ARCHS (default 90). Prints one line per
# (shape, case, round, side) and a summary of medians with new / base; the
# JSON rows go to $OUT/ab.jsonl (OUT default ./gpu_ab_out).
set -euo pipefail
cd "$(dirname "$0")/.."
base_src=${1:?usage: scripts/gpu_ab.sh BASE_DIR (with the baseline src/ and include/)}
[ -d "$base_src/src" ] && [ -d "$base_src/include" ] || {
  echo "gpu_ab: $base_src must hold the baseline's src/ and include/" >&2
  exit 2
}
OUT=${OUT:-$PWD/gpu_ab_out}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The baseline tree: this tree's build files and benchmark, the baseline's library.
mkdir -p "$work/base"
cp -r CMakeLists.txt bench tools python "$work/base/"
cp -r "$base_src/src" "$base_src/include" "$work/base/"

build() {  # build SOURCE_DIR BUILD_DIR: the benchmark driver alone
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
    -DSPATTN_CUDA_HEAD_DIMS="${HEAD_DIM:-128}" -DSPATTN_BUILD_TESTS=OFF -DSPATTN_BUILD_TOOLS=OFF > "$2.log" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target spattn_cuda_bench >> "$2.log" 2>&1 ||
    { echo "gpu_ab: build of $1 failed (log $2.log)" >&2; tail -n 30 "$2.log" >&2; return 1; }
}
build "$work/base" "$work/build-base" &
base_build=$!
build "$PWD" "$work/build-new" &
new_build=$!
wait "$base_build" && wait "$new_build"

: > "$OUT/ab.jsonl"
for shape in $(echo "${SHAPES:-32768x16}" | tr , ' '); do
  len=${shape%x*}
  heads=${shape#*x}
  for round in $(seq "${ROUNDS:-2}"); do
    for side in base new; do
      "$work/build-$side/bench/spattn_cuda_bench" --cases "${CASES:-dense,causal,window,streaming,bigbird,dilated}" \
        --seq "$len" --heads "$heads" --head-dim "${HEAD_DIM:-128}" --kernel "${KERNEL:-fused}" |
        grep '^{' | python3 -c '
import json, sys
side, round_ = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    r = json.loads(line)
    r["side"], r["round"] = side, int(round_)
    print(json.dumps(r))
' "$side" "$round" >> "$OUT/ab.jsonl"
    done
  done
done

python3 - "$OUT/ab.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows:
    print(f"{r['seq']:>7} {r['heads']:>3} {r['case']:>10} round {r['round']} {r['side']:>4} {r['kernel']:>5} "
          f"{r['time_ms']:9.3f} ms {r['tflops']:6.1f} TFLOP/s")
print("\nmedian over rounds (TFLOP/s): shape, case, base, new, new / base")
keys = sorted({(r["seq"], r["heads"], r["case"]) for r in rows}, key=lambda k: (k[0], k[1]))
for seq, heads, case in keys:
    speed = {side: statistics.median(r["tflops"] for r in rows
                                     if (r["seq"], r["heads"], r["case"], r["side"]) == (seq, heads, case, side))
             for side in ("base", "new")}
    print(f"{seq:>7} {heads:>3} {case:>10} {speed['base']:7.1f} {speed['new']:7.1f} {speed['new'] / speed['base']:6.3f}")
PY
