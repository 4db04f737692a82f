#!/usr/bin/env bash
# scripts/gpu_ab.sh - same-run A/B timing of the fused CUDA kernels: this
# source tree against one or more others (variants exported beside it, e.g.
# with `git archive <ref> src include | tar x -C .ab-base`), all built for one
# architecture, then timed in alternating rounds on the same card so that
# clock and thermal drift fall on every side alike.
#
#   scripts/gpu_ab.sh VARIANT_DIR [VARIANT_DIR...]
#
# Each VARIANT_DIR holds a variant's src/ and include/, and its bench/ where
# this tree's benchmark does not build against the variant's API (the rest of
# the build, and bench/ otherwise, is taken from this tree); this tree is the
# side "new", a variant the side named by its directory. What is timed: SPECS, a
# space-separated list of HEAD_DIM:HEADS:CASES:KERNEL:SEQ[:FLAGS] (CASES comma
# separated, KERNEL the --kernel of spattn_cuda_bench, FLAGS more of its flags
# for this spec alone, comma separated: --q-len,4,--kv-heads,8), or, without SPECS,
# every shape of SHAPES (default 32768x16) with CASES (default
# dense,causal,window,streaming,bigbird,dilated), HEAD_DIM (default 128) and
# KERNEL (default fused). Also ROUNDS (default 2), CUDA_ARCHS (default 90),
# HEAD_DIMS (the builds' SPATTN_CUDA_HEAD_DIMS, default the head dims timed),
# BENCH_ARGS (more spattn_cuda_bench flags for every timing, e.g. "--block 64"),
# TIMING (its timing flags, default "--warmup-ms 25 --timed-ms 100": the peer
# tables' regime, each case after the bench's 500 ms rest).
# Prints one line per (spec, case, round, side) and the medians per side with
# their ratio to the first variant; the JSON rows (fields side, round) go to
# $OUT/ab.jsonl (OUT default ./gpu_ab_out).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/gpu_ab.sh VARIANT_DIR [VARIANT_DIR...]" >&2; exit 2; }
for dir in "$@"; do
  [ -d "$dir/src" ] && [ -d "$dir/include" ] || { echo "gpu_ab: $dir must hold a variant's src/ and include/" >&2; exit 2; }
done
OUT=${OUT:-$PWD/gpu_ab_out}
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

specs=${SPECS:-}
if [ -z "$specs" ]; then
  for shape in $(echo "${SHAPES:-32768x16}" | tr , ' '); do
    specs+=" ${HEAD_DIM:-128}:${shape#*x}:${CASES:-dense,causal,window,streaming,bigbird,dilated}:${KERNEL:-fused}:${shape%x*}"
  done
fi
head_dims=${HEAD_DIMS:-$(for spec in $specs; do echo "${spec%%:*}"; done | sort -un | paste -sd';')}

# Side names and source trees: the variants (named by their directory), then this tree.
sides=() trees=()
for dir in "$@"; do
  side=$(basename "$dir" | tr -c 'A-Za-z0-9_.\n-' _)
  [[ " ${sides[*]} new " != *" $side "* ]] || { echo "gpu_ab: two sides named $side (rename a directory)" >&2; exit 2; }
  mkdir -p "$work/$side"
  cp -r CMakeLists.txt cmake bench tools python "$work/$side/"
  cp -r "$dir/src" "$dir/include" "$work/$side/"
  if [ -d "$dir/bench" ]; then rm -rf "$work/$side/bench" && cp -r "$dir/bench" "$work/$side/"; fi
  sides+=("$side") trees+=("$work/$side")
done
sides+=(new) trees+=("$PWD")

build() {  # build SOURCE_DIR BUILD_DIR: the benchmark driver alone
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}" \
    -DSPATTN_CUDA_HEAD_DIMS="$head_dims" -DSPATTN_BUILD_TESTS=OFF -DSPATTN_BUILD_TOOLS=OFF > "$2.log" 2>&1 &&
    cmake --build "$2" -j"$(nproc)" --target spattn_cuda_bench >> "$2.log" 2>&1 ||
    { echo "gpu_ab: build of $1 failed (log $2.log)" >&2; tail -n 30 "$2.log" >&2; return 1; }
}
pids=()
for n in "${!sides[@]}"; do
  build "${trees[$n]}" "$work/build-${sides[$n]}" &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done  # every build ends before the tree is removed
[ $failed -eq 0 ] || exit 1

: > "$OUT/ab.jsonl"
for round in $(seq "${ROUNDS:-2}"); do
  for spec in $specs; do
    IFS=: read -r head_dim heads cases kernel seq flags <<< "$spec"
    for side in "${sides[@]}"; do
      "$work/build-$side/bench/spattn_cuda_bench" --cases "$cases" --seq "$seq" --heads "$heads" \
        --head-dim "$head_dim" --kernel "$kernel" ${TIMING:---warmup-ms 25 --timed-ms 100} ${BENCH_ARGS:-} \
        ${flags//,/ } |
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

python3 - "$OUT/ab.jsonl" "${sides[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
sides = sys.argv[2:]
for r in rows:
    print(f"{r['seq']:>7} {r['heads']:>3} D{r['head_dim']:<3} Lq {r.get('q_len', r['seq']):<6} block {r.get('block', 0):<3} {r['case']:>10} "
          f"round {r['round']} {r['side']:>10} {r['kernel']:>5} {r['time_ms']:9.3f} ms {r['tflops']:6.1f} TFLOP/s")
print(f"\nmedian over rounds (TFLOP/s), and each side / {sides[0]}:")
def key_of(r):  # one timed configuration: rows with another kernel, query count or mask block differ
    return (r["seq"], r["heads"], r["head_dim"], r["case"], r["kernel"], r.get("q_len", r["seq"]), r.get("block", 0))
for key in sorted({key_of(r) for r in rows}):
    speed = {side: statistics.median(r["tflops"] for r in rows if key_of(r) == key and r["side"] == side)
             for side in sides}
    cells = "  ".join(f"{side} {speed[side]:7.1f} ({speed[side] / speed[sides[0]]:.3f})" for side in sides)
    queries = "" if key[5] == key[0] else f" Lq {key[5]}"
    print(f"{key[0]:>7} {key[1]:>3} D{key[2]:<3} {key[3]:>10} {key[4]:>5} block {key[6]:<3}{queries}  {cells}")
PY
