#!/usr/bin/env bash
# scripts/gpu_dynamic.sh - dynamic block selection on a GPU machine: the GPU
# selection tests, `spattn run --pattern topk` (selection breakdown, the
# device-fused select-then-attend, the same masks run as static masks, causal
# attention, recall and output error) at the benchmark shapes with topk = 10%
# of the blocks and tau 0.9, `spattn bench --pattern topk` with the same
# number of blocks per row at every length (CONST_TOPK, default 25: 10% at
# 32K), the Python package with its GPU tests of dynamic attention, then
# bench/torch_peers.py for the SDPA causal baselines (cuDNN, flash). Results
# go to $OUT (default ./gpu_dynamic_out): dynamic.jsonl, bench_topk.json,
# torch.json, and logs.tgz.
#
#   scripts/gpu_dynamic.sh [build] [test] [bench] [python] [peers]   (default: all)
#
# Environment: BUILD (default build-dyn; binaries already there and runnable
# are reused, otherwise the test and the CLI are built for CUDA_ARCHS, default
# 90, head dim 128), SEQS (default 8192,32768), CONST_TOPK (default 25),
# WHEELS (build-time Python wheels for machines without them, default .whl).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_dynamic_out}
BUILD=${BUILD:-build-dyn}
SEQS=${SEQS:-8192,32768}
CONST_TOPK=${CONST_TOPK:-25}
LOG=$OUT/logs
mkdir -p "$LOG"
trap 'tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"' EXIT
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test bench python peers)
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }
step() {  # step NAME LOG CMD...: runs CMD into LOG, prints its status
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" > "$LOG/$log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s (log $log)"
  [ $rc -ne 0 ] && tail -n 30 "$LOG/$log"
  return $rc
}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOG/card.txt"

TEST=$BUILD/tests/gpu_test_select
CLI=$BUILD/tools/spattn
if want build && ! { "$TEST" --gtest_list_tests > /dev/null 2>&1 && "$CLI" --help > /dev/null 2>&1; }; then
  args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}"
        -DSPATTN_CUDA_HEAD_DIMS=128)
  [ ! -d /usr/include/gtest ] && [ -d .deps/googletest ] && args+=(-DSPATTN_GTEST_SOURCE="$PWD/.deps/googletest")
  step configure configure.log cmake -S . -B "$BUILD" "${args[@]}" || exit 1
  step build build.log cmake --build "$BUILD" -j16 --target gpu_test_select spattn_cli || exit 1
fi

status=0
if want test; then
  step select_tests select_tests.log "$TEST" || status=1
  tail -n 3 "$LOG/select_tests.log"
fi

if want bench; then
  : > "$OUT/dynamic.jsonl"
  for seq in ${SEQS//,/ }; do
    for sel in "--topk $((seq / 128 / 10))" "--tau 0.9"; do
      common=(run --pattern topk $sel --causal --seq "$seq" --heads 16 --kv-heads 16 --head-dim 128
              --dtype bf16 --block 128 --backend cuda --vs-dense --repeats 10 --quality-rows 16)
      name="L${seq}_${sel// /_}"
      step "topk $name" "topk_$name.log" "$CLI" "${common[@]}" --json || status=1
      python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' "$LOG/topk_$name.log" |
        tee -a "$OUT/dynamic.jsonl"
    done
  done
  step "bench topk $CONST_TOPK" bench_topk.log "$CLI" bench --pattern topk --topk "$CONST_TOPK" --causal \
    --seqs "$SEQS" --heads 16 --kv-heads 16 --head-dim 128 --dtype bf16 --block 128 --backend cuda \
    --repeats 10 --quality-rows 16 --out "$OUT/bench_topk.json" || status=1
  tail -n 6 "$LOG/bench_topk.log"
fi

if want python; then
  {
    python3 -m pip install --no-index --no-deps "${WHEELS:-.whl}"/scikit_build_core-*.whl \
      "${WHEELS:-.whl}"/pathspec-*.whl
    python3 -c "import pytest" 2>/dev/null || python3 -m pip install --no-index --no-deps \
      "${WHEELS:-.whl}"/pytest-*.whl "${WHEELS:-.whl}"/pluggy-*.whl "${WHEELS:-.whl}"/iniconfig-*.whl
    python3 -c "import scikit_build_core.build as b; print(b.__file__)"
  } > "$LOG/wheels.log" 2>&1
  CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90} -DSPATTN_CUDA_HEAD_DIMS=128" SPATTN_CUDA=ON \
    step pip_install pip_install.log python3 -m pip install --no-build-isolation --no-deps -v . &&
    step pytest pytest.log python3 -m pytest tests/python/test_dynamic_gpu.py tests/python/test_dynamic.py \
      -q -p no:cacheprovider || status=1
  tail -n 3 "$LOG/pytest.log"
fi

if want peers; then
  step torch_peers torch_peers.log python3 bench/torch_peers.py --seqs "$SEQS" --masks causal --no-flex \
    --out "$OUT/torch.json" || status=1
  tail -n 12 "$LOG/torch_peers.log"
fi
exit $status
