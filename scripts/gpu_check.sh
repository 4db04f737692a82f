#!/usr/bin/env bash
# scripts/gpu_check.sh - the CUDA backend's whole check on a GPU machine, in
# one go: configure and build (library, GPU tests, benchmark driver), run the
# GPU test suite (ctest -L gpu, the library choosing the kernel; then the
# attention suite with the sm80 kernel forced), compute-sanitizer memcheck and
# racecheck on small problems of the forward and backward kernels (plus
# synccheck on the sm90 kernel), the Python
# package's tests (pytest, marker gpu included), then the benchmarks (both
# fused kernels alone, then next to their peers). Results go
# to $OUT (default ./gpu_check_out): the JSON results and all logs packed in
# logs.tgz.
#
#   scripts/gpu_check.sh [build] [test] [sanitize] [python] [kvcache] [distributed] [bench] [backward] [seeds] [profile] [peers] [masks]
#   (default: all but profile and masks; kvcache runs the KV-cache kernels'
#   tests, sanitizers and decode benchmark, bench/kvcache_gpu.py; distributed
#   runs the context-parallel tests, gloo ranks sharing the GPU and on the host; masks times mask plans built on the
#   device against host build + upload, bench/mask_build_bench.cpp; backward
#   times the backward pass, spattn_cuda_bench --pass backward)
#
# Environment: BUILD (build dir, default build-gpu), CUDA_ARCHS (default 90),
# HEAD_DIMS (SPATTN_CUDA_HEAD_DIMS of the build, default all),
# CASES (benchmark cases of the bench stage, default all), BWD_CASES (of the
# backward stage, default dense,causal,window,streaming,random,bigbird),
# HEAD_DIM (of the bench, backward and peers stages, default 128), PEERS_BLOCK (mask blocks of the peers
# stage, default 128), PROFILE_CASE (of the profile stage, default dense),
# PROFILE_SKIP (kernel launches of that case skipped before the profiled one,
# default 1: a dilated case's launches are rest pass, permuted pass, ...),
# PROFILE_SHAPE (seq x heads x head dim of the profile stage, default 16384x16x128),
# SHAPES (bench and peer shapes, default 32768x16,131072x8), WHEELS (folder of the
# Python build backend's wheels, and hypothesis's and sortedcontainers' for the
# fuzz tests, for machines without PyPI, default .whl).
# Where GoogleTest is not
# installed, a source tree in .deps/googletest is used; without libpng the CLI
# is skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
BUILD=${BUILD:-build-gpu}
LOG=$OUT/logs
mkdir -p "$LOG"
pack() {  # few files come back from the GPU machine: results plus one archive
  cp "$LOG"/*.json "$LOG"/*.jsonl "$OUT"/ 2>/dev/null
  tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"
}
trap pack EXIT
default_stages=(build test sanitize python kvcache distributed bench backward peers seeds)
# shellcheck source=scripts/stages.sh
source scripts/stages.sh "$@"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$LOG/card.txt"

if want build; then
  args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90}")
  [ -n "${HEAD_DIMS:-}" ] && args+=(-DSPATTN_CUDA_HEAD_DIMS="$HEAD_DIMS")
  if [ ! -d /usr/include/gtest ] && [ -d .deps/googletest ]; then
    args+=(-DSPATTN_GTEST_SOURCE="$PWD/.deps/googletest")
  fi
  [ -f /usr/include/png.h ] || args+=(-DSPATTN_BUILD_TOOLS=OFF)
  step configure configure.log cmake -S . -B "$BUILD" "${args[@]}" || exit 1
  step build build.log cmake --build "$BUILD" -j16 || exit 1
  grep -E "registers|spill" "$LOG/build.log" | sort | uniq -c | head -20
fi

if want test; then
  # The whole suite with the kernel choice left to the library (the sm90
  # kernel where it runs), then the attention suite again on the portable one.
  # Four tests at a time, four reference threads each: most of a test's time
  # is the fp64 reference on the host, which scales poorly past a few threads.
  OMP_NUM_THREADS=4 step ctest ctest_gpu.log ctest --test-dir "$BUILD" -L gpu -j4 --output-on-failure --timeout 600
  tail -n 4 "$LOG/ctest_gpu.log"
  SPATTN_CUDA_KERNEL=sm80 OMP_NUM_THREADS=16 step "attention suite, sm80 forced" gpu_attention_sm80.log \
    "$BUILD/tests/gpu_test_attention"
  tail -n 2 "$LOG/gpu_attention_sm80.log"
fi

if want sanitize; then
  for tool in memcheck racecheck; do
    for suite in gpu_test_attention gpu_test_varlen gpu_test_backward; do
      step "sanitizer $tool $suite" "sanitizer_${tool}_$suite.log" compute-sanitizer --tool "$tool" \
        --error-exitcode 1 "$BUILD/tests/$suite" --gtest_filter='GpuSanitizerSmall.*'
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$LOG/sanitizer_${tool}_$suite.log" | tail -n 3
    done
  done
  for tool in memcheck racecheck; do  # the same small problems on the sm80 kernel (both of its tiles)
    step "sanitizer $tool (sm80 forced)" "sanitizer_sm80_$tool.log" env SPATTN_CUDA_KERNEL=sm80 \
      compute-sanitizer --tool "$tool" --error-exitcode 1 "$BUILD/tests/gpu_test_attention" \
      --gtest_filter='GpuSanitizerSmall.*'
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$LOG/sanitizer_sm80_$tool.log" | tail -n 3
  done
  for tool in memcheck racecheck synccheck; do
    step "sanitizer $tool (sm90)" "sanitizer_sm90_$tool.log" compute-sanitizer --tool "$tool" --error-exitcode 1 \
      "$BUILD/tests/gpu_test_kernels" --gtest_filter='GpuSanitizerSm90.*'
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED|SKIPPED" "$LOG/sanitizer_sm90_$tool.log" | tail -n 3
  done
  step "sanitizer memcheck (graph)" sanitizer_graph.log compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$BUILD/tests/gpu_test_cuda_api" --gtest_filter='CudaBackend.*'
fi

install_package() {  # the Python package, built with CUDA (once per machine)
  python3 -c "import spattn, sys; sys.exit(0 if spattn.built_with_cuda() else 1)" 2>/dev/null && return 0
  if ! python3 -c "import scikit_build_core" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/scikit_build_core-*.whl \
      "${WHEELS:-.whl}"/pathspec-*.whl > "$LOG/wheels.log" 2>&1
  fi
  if ! python3 -c "import hypothesis" 2>/dev/null; then  # tests/python/test_fuzz.py
    python3 -m pip install -q --no-index --no-deps "${WHEELS:-.whl}"/hypothesis-*.whl \
      "${WHEELS:-.whl}"/sortedcontainers-*.whl >> "$LOG/wheels.log" 2>&1
  fi
  local cmake_args="-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}"
  [ -n "${HEAD_DIMS:-}" ] && cmake_args+=" -DSPATTN_CUDA_HEAD_DIMS=$HEAD_DIMS"
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=16 SPATTN_CUDA=ON \
    step pip_install pip_install.log python3 -m pip install --no-build-isolation --no-deps .
}
if want python; then
  install_package && step pytest pytest.log python3 -m pytest tests/python -q -p no:cacheprovider
  tail -n 3 "$LOG/pytest.log"
fi
if want kvcache; then
  # The KV-cache kernels: their tests (CUDA and host), compute-sanitizer on a
  # few small cases, then the decode benchmark next to its peers.
  if install_package; then
    step "pytest kvcache" pytest_kvcache.log python3 -m pytest tests/python/test_kvcache_gpu.py \
      tests/python/test_kvcache.py -q -p no:cacheprovider
    tail -n 3 "$LOG/pytest_kvcache.log"
    for tool in memcheck racecheck; do
      step "sanitizer $tool kvcache" "sanitizer_${tool}_kvcache.log" compute-sanitizer --tool "$tool" \
        --error-exitcode 1 python3 -m pytest tests/python/test_kvcache_gpu.py -q -p no:cacheprovider \
        -k "(decode and page16 and (streaming or dilated)) or graph or head_dims or chosen"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$LOG/sanitizer_${tool}_kvcache.log" | tail -n 3
    done
    step "kvcache bench" kvcache_gpu.log python3 bench/kvcache_gpu.py --out "$LOG/kvcache_gpu.json"
    cat "$LOG/kvcache_gpu.log"
  fi
fi
if want distributed; then
  if [ -x "$BUILD/tests/gpu_test_dist_attention" ]; then  # the C++ driver (built by the build stage)
    step "C++ context parallelism" dist_cpp.log "$BUILD/tests/gpu_test_dist_attention"
    tail -n 2 "$LOG/dist_cpp.log"
    step "sanitizer memcheck, C++ context parallelism" sanitizer_memcheck_dist.log compute-sanitizer --tool memcheck \
      --error-exitcode 1 "$BUILD/tests/gpu_test_dist_attention" --gtest_filter='*InProcess*'
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$LOG/sanitizer_memcheck_dist.log" | tail -n 3
  fi
  if install_package; then
    step "pytest distributed" pytest_distributed.log python3 -m pytest tests/python/test_distributed_gpu.py \
      tests/python/test_distributed.py -q -p no:cacheprovider
    tail -n 3 "$LOG/pytest_distributed.log"
    # One rank's peak memory at 256K and 1M tokens over 2, 4 and 8 ranks.
    step "context-parallel memory" cp_memory.log python3 bench/cp_memory.py --out "$LOG/cp_memory.json"
    sed -n '/^|/p' "$LOG/cp_memory.log"
  fi
fi
if want bench; then
  # Both fused kernels in the same run: sm80 forced, then the library's choice
  # (the sm90 kernel where it runs, dilated splits included); each case timed
  # as in the peer tables (after a rest, 25 ms warm-up, 100 ms timed).
  for shape in $(echo "${SHAPES:-32768x16,131072x8}" | tr , ' '); do
    seq=${shape%x*}; heads=${shape#*x}
    for kernel in sm80 fused; do
      step "bench $shape $kernel" "bench_${shape}_$kernel.jsonl" "$BUILD/bench/spattn_cuda_bench" \
        --cases "${CASES:-dense,causal,window,streaming,random,bigbird,dilated,window512,dilated-only}" \
        --seq "$seq" --heads "$heads" --head-dim "${HEAD_DIM:-128}" --kernel "$kernel" --warmup-ms 25 --timed-ms 100
      python3 - "$LOG/bench_${shape}_$kernel.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
dense = next((r["time_ms"] for r in rows if r["case"] == "dense"), None)
for r in rows:
    ratio = r["time_ms"] / (r["density"] * dense) if dense else float("nan")
    print(f"{r['seq']:>7} {r['heads']:>3} {r['case']:>10} {r['kernel']:>5} density {r['density']:.4f} "
          f"{r['time_ms']:9.3f} ms {r['tflops']:6.1f} TFLOP/s  vs d*dense {ratio:.2f}  "
          f"mask {r['mask_build_ms']:.1f} ms, plan+upload {r.get('prepare_ms', float('nan')):.1f} ms")
PY
    done
  done
fi

if want backward; then
  # The backward pass on a plan built once (delta, dK/dV and dQ kernels),
  # each case timed as the forward ones; TFLOP/s = 2.5 x 4 x kept pairs x D / time.
  for shape in $(echo "${SHAPES:-32768x16,131072x8}" | tr , ' '); do
    seq=${shape%x*}; heads=${shape#*x}
    step "backward $shape" "bwd_${shape}.jsonl" "$BUILD/bench/spattn_cuda_bench" --pass backward \
      --cases "${BWD_CASES:-dense,causal,window,streaming,random,bigbird}" \
      --seq "$seq" --heads "$heads" --head-dim "${HEAD_DIM:-128}" --warmup-ms 25 --timed-ms 100
    python3 - "$LOG/bwd_${shape}.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
dense = next((r["time_ms"] for r in rows if r["case"] == "dense"), None)
for r in rows:
    ratio = r["time_ms"] / (r["density"] * dense) if dense else float("nan")
    print(f"{r['seq']:>7} {r['heads']:>3} {r['case']:>10} backward density {r['density']:.4f} "
          f"{r['time_ms']:9.3f} ms {r['tflops']:6.1f} TFLOP/s  vs d*dense {ratio:.2f}  plan {r['plan_ms']:.1f} ms")
PY
  done
fi

if want seeds; then
  for kernel in fused naive; do
    for seq in 128 256 512 1024 2048 4096; do
      "$BUILD/bench/spattn_cuda_bench" --cases dense,seed-streaming,seed-blockdiag --seq "$seq" --heads 1 \
        --head-dim 64 --kernel "$kernel" --repeats 10
    done
  done > "$LOG/seeds.jsonl" 2>&1
  echo "== seeds: $(grep -c '^{' "$LOG/seeds.jsonl") rows"
fi

if want profile; then
  # Stall reasons, pipe use and the hottest SASS instructions of the fused
  # kernel on a dense problem (PROFILE_CASE, default dense; its launch
  # PROFILE_SKIP + 1).
  IFS=x read -r profile_seq profile_heads profile_head_dim <<< "${PROFILE_SHAPE:-16384x16x128}"
  step profile profile.log ncu --kernel-name regex:fwd_sm --launch-skip "${PROFILE_SKIP:-1}" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy \
    --section InstructionStats --section SchedulerStats --section SourceCounters --import-source no \
    -o "$LOG/profile" -f "$BUILD/bench/spattn_cuda_bench" --cases "${PROFILE_CASE:-dense}" --seq "$profile_seq" \
    --heads "$profile_heads" --head-dim "$profile_head_dim" --repeats 1
  if [ -f "$LOG/profile.ncu-rep" ]; then
    step "profile details" profile_details.log ncu --import "$LOG/profile.ncu-rep" &&
      grep -E "Stall|Throughput|Pipe|Issue|Occupancy|Registers" "$LOG/profile_details.log" | head -40
    # Each pipe's share of its peak (the ComputeWorkloadAnalysis chart), from the raw metrics.
    step "profile pipes" profile_raw.csv ncu --import "$LOG/profile.ncu-rep" --page raw --csv &&
      python3 bench/ncu_pipes.py "$LOG/profile_raw.csv"
    step "profile source" profile_source.log sh -c "ncu --import '$LOG/profile.ncu-rep' --page source --csv \
      --print-source sass > '$LOG/profile_sass.csv'" &&
      step "profile hotspots" profile_hotspots.log python3 bench/ncu_hotspots.py "$LOG/profile_sass.csv" --top 40 &&
      cat "$LOG/profile_hotspots.log"
    rm -f "$LOG/profile.ncu-rep"
  fi
fi

if want masks; then
  step "mask plans" mask_build.jsonl "$BUILD/bench/spattn_mask_build_bench" --seqs 131072,1048576
  grep -v '^{' "$LOG/mask_build.jsonl"
fi

if want peers; then
  PYTHONUNBUFFERED=1 step peers peers.log python3 bench/gpu_peers.py --bench "$BUILD/bench/spattn_cuda_bench" \
    --shapes "${SHAPES:-32768x16,131072x8}" --head-dim "${HEAD_DIM:-128}" --block "${PEERS_BLOCK:-128}" \
    --out "$LOG/cuda_peers.json"
  sed -n '/^|/p' "$LOG/peers.log"
fi
exit $status
